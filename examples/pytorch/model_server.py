#!/usr/bin/env python3
"""A PyTorch model server with SIRIUS's inference side (docs/memory.md, "The PyTorch model
server"): N models made up on the fly (MLPs of --layers Linear+ReLU layers, --model-mb MiB of
fp32 weights each, generated from --seed on the CPU and kept in pinned host memory), each
loaded onto the GPU at its first request, released after T_idle without requests (its tensors
dropped and PyTorch's cache emptied, so the memory goes back to the GPU, or to training under
tandem's pool), the least recently used one evicted when a load runs out of memory.

Loading is pipelined (SIRIUS's pipelined execution): every layer's host-to-device copy is queued
on a copy stream of its own with an event after it, and the first request's forward runs on the
compute stream, each layer waiting only for its own layer's event, so layer i computes while
layer i+1 is copied. --loading sequential loads, waits, then runs (load-then-run); alternate
takes turns, to compare the two in one run.

Requests arrive as a Poisson process (--rate) or as SIRIUS's traces (--trace), per --interval-s
a rate drawn from: LIGHT LogNormal(1, 1) (mean 4.5 requests/s), HEAVY LogNormal(4.5, 0.3) (mean
94), BURST LIGHT's with 30% of intervals HEAVY's (as infer-sim's), to uniformly chosen models;
or maf, a synthetic stand-in for the Microsoft Azure Functions trace (the trace itself is not
shipped): heavy-tailed rates LogNormal(2, 1.5) (mean 23) to models chosen by a Zipf law of
exponent 1.05 (a few models take most requests, as functions do; SIRIUS's SKEWED). --rate-scale
multiplies every rate (a slower machine's share). Requests are answered one at a time (latency
from arrival).

T_idle: --idle-ms, or --target-compliance P with --slo-ms: the server measures a request's
service time and a cold start's extra latency first (one load of model 0 and a few requests,
untimed), and asks SIRIUS's queueing model (sirius_model.py) for the smallest T_idle and W that
reach P; it prints the W to give tandemd as TANDEM_MEM_WATERMARK.

    python3 model_server.py --models 3 --model-mb 64 --rate 6 --seconds 20 --slo-ms 100 \\
        --target-compliance 0.99

Output: a JSON line when serving starts, one per load/release/request with --log-events, and a
summary line (requests, failed, p50/p99 ms, slo_attainment, cold_starts, idle_releases,
evictions, loaded_high, load_p50_ms, idle_ms, watermark_mb, ...).
"""
import argparse
import json
import math
import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sirius_model  # noqa: E402

MIB = 1 << 20


class RateTrace:
    """SIRIUS's rate traces (LIGHT and BURST as infer-sim draws them) and the synthetic maf: one
    rate per interval, drawn as the run reaches it."""

    def __init__(self, kind, interval_s, seed, scale=1.0):
        self.kind, self.interval_s, self.rng, self.rates, self.scale = kind, interval_s, random.Random(seed), [], scale

    def draw(self):
        if self.kind == "maf":
            return self.rng.lognormvariate(2.0, 1.5)
        heavy = self.kind == "heavy" or self.kind == "burst" and self.rng.random() < 0.3
        return self.rng.lognormvariate(4.5, 0.3) if heavy else self.rng.lognormvariate(1.0, 1.0)

    def at(self, t):
        i = int(t / self.interval_s)
        while len(self.rates) <= i:
            self.rates.append(self.draw() * self.scale)
        return max(self.rates[i], 0.01)

    def chooser(self, models, seed):
        """The model of each request: uniform, or for maf by a Zipf law of exponent 1.05."""
        rng = random.Random(seed)
        if self.kind != "maf":
            return lambda: rng.randrange(models)
        weights = [1 / (k + 1) ** 1.05 for k in range(models)]
        return lambda: rng.choices(range(models), weights)[0]

    def mean(self, seconds):
        n = max(1, math.ceil(seconds / self.interval_s))
        return sum(self.at(i * self.interval_s) for i in range(n)) / n


class Model:
    """One model: its pinned host copy (an nn.Sequential on the CPU) and, while loaded, its GPU copy.
    A copy's weights are views into one flat buffer: a load is one allocation, and a release gives
    back whole segments of PyTorch's caching allocator (weights of several models sharing one of
    its segments would keep it alive)."""

    def __init__(self, torch, nn, index, mb, layers, seed):
        self.index, self.torch, self.nn = index, torch, nn
        self.layers = layers
        self.dim = max(8, int(math.sqrt(mb * MIB / 4 / layers)))
        self.per_layer = self.dim * self.dim + self.dim  # weight and bias
        g = torch.Generator().manual_seed(seed * 1000 + index)
        flat = torch.empty(layers * self.per_layer)
        for i in range(layers):
            w, b = self.views(flat, i)
            w.copy_(torch.randn(self.dim, self.dim, generator=g) / math.sqrt(self.dim))
            b.zero_()
        self.flat = flat.pin_memory()  # page-locked: copies to the GPU run asynchronously, at full speed
        self.host = self.sequential(self.flat)
        self.gpu, self.gpu_flat, self.ready, self.last_used = None, None, None, 0.0
        self.bytes = self.flat.numel() * 4

    def views(self, flat, i):
        o = i * self.per_layer
        return flat[o:o + self.dim * self.dim].view(self.dim, self.dim), flat[o + self.dim * self.dim:o + self.per_layer]

    def sequential(self, flat):
        """The MLP (Linear + ReLU per layer) with its parameters viewing `flat`."""
        nn, mods = self.nn, []
        for i in range(self.layers):
            lin = nn.Linear(self.dim, self.dim, device="meta")
            w, b = self.views(flat, i)
            lin.weight, lin.bias = nn.Parameter(w, requires_grad=False), nn.Parameter(b, requires_grad=False)
            mods += [lin, nn.ReLU()]
        return nn.Sequential(*mods).eval()

    def allocate(self):
        """The GPU copy's memory (uninitialised): may raise torch.OutOfMemoryError."""
        return self.torch.empty_like(self.flat, device="cuda")

    def queue_copies(self, gpu_flat, copy_stream):
        """Every layer's weights copied on `copy_stream`; an event after each layer's copy."""
        torch = self.torch
        copy_stream.wait_stream(torch.cuda.current_stream())  # the memory was allocated in compute order
        start = torch.cuda.Event(enable_timing=True)
        start.record(copy_stream)
        ready = []
        with torch.cuda.stream(copy_stream):
            for i in range(self.layers):
                o = slice(i * self.per_layer, (i + 1) * self.per_layer)
                gpu_flat[o].copy_(self.flat[o], non_blocking=True)
                ready.append(torch.cuda.Event(enable_timing=True))
                ready[-1].record(copy_stream)
        self.copied = (start, ready[-1])  # the copies' GPU time, read once they are done
        return ready

    def forward(self, x, layer_work):
        """The model on the current stream; while its load is in flight, each Linear waits for
        its own copy only (pipelined). `layer_work()` adds a layer's GPU time."""
        ready = iter(self.ready or [])
        stream = self.torch.cuda.current_stream()
        for layer in self.gpu:
            if isinstance(layer, self.torch.nn.Linear):
                event = next(ready, None)
                if event is not None:
                    stream.wait_event(event)
                x = layer(x)
                layer_work()
            else:
                x = layer(x)
        return x


class Server:
    def __init__(self, torch, args, models):
        self.torch, self.args, self.models = torch, args, models
        self.copy_stream = torch.cuda.Stream()
        self.work = None
        if args.layer_gpu_ms > 0:  # examples/pytorch/gpu_time.py, beside this file in the source tree
            from gpu_time import GpuTime
            self.work = GpuTime(torch, args.layer_gpu_ms, args.layer_gpu_ms)
        self.idle_s = math.inf
        self.t0 = time.monotonic()
        self.cold_starts = self.idle_releases = self.evictions = self.loaded_high = 0
        # A cold start's request from its load's start to its answer (no queueing), by loading.
        self.load_ms, self.first_ms = [], {"pipelined": [], "sequential": []}
        self.log = args.log_events
        self.api = None
        if args.tandem_requests:  # examples/pytorch/tandem_torch.py, beside this file
            import tandem_torch
            self.api = tandem_torch.requests()
            if not self.api:
                print("model_server.py: --tandem-requests: libtandem.so is not loaded; requests are not reported",
                      file=sys.stderr)

    def now(self):
        return time.monotonic() - self.t0

    def event(self, **fields):
        if self.log:
            print(json.dumps(dict(fields, t=round(self.now(), 4),
                                  reserved_mb=round(self.torch.cuda.memory_reserved() / MIB, 1))), flush=True)

    def loaded(self):
        return [m for m in self.models if m.gpu is not None]

    def unload(self, m, why):
        m.gpu = m.gpu_flat = m.ready = None
        self.torch.cuda.empty_cache()  # the weights' segments go back to the GPU, not to PyTorch's cache
        if why == "idle":
            self.idle_releases += 1
        else:
            self.evictions += 1
        self.event(event="release", model=m.index, why=why, loaded=[o.index for o in self.loaded()])

    def release_idle(self):
        """Releases the models idle for T_idle; seconds until the next one would be."""
        nxt = math.inf
        for m in self.loaded():
            left = m.last_used + self.idle_s - self.now()
            if left <= 0:
                self.unload(m, "idle")
            else:
                nxt = min(nxt, left)
        return nxt

    def loading(self):
        mode = self.args.loading
        if mode == "alternate":
            return "pipelined" if self.cold_starts % 2 == 0 else "sequential"
        return mode

    def ensure(self, m):
        """Loads model m if it is not, evicting the least recently used others while memory is
        short. None when it is loaded already, else how it was loaded; False: no room even so."""
        if m.gpu is not None:
            return None
        started = time.monotonic()
        while True:
            try:
                flat = m.allocate()
                break
            except self.torch.OutOfMemoryError:
                others = self.loaded()
                if not others:
                    return False
                self.unload(min(others, key=lambda o: o.last_used), "evict")
        # The load's host part (allocation, evictions); its copies are timed on the GPU.
        m.load_started, m.alloc_ms = started, (time.monotonic() - started) * 1e3
        mode = self.loading()
        m.gpu_flat, m.ready = flat, m.queue_copies(flat, self.copy_stream)
        m.gpu = m.sequential(flat)
        if mode == "sequential":
            self.copy_stream.synchronize()  # load, then run
            m.ready = None
        self.cold_starts += 1
        self.loaded_high = max(self.loaded_high, len(self.loaded()))
        return mode

    def answer(self, m):
        """One request to model m (a batch of --batch inputs); returns once the answer is on the host."""
        torch = self.torch
        x = torch.randn(self.args.batch, m.dim, device="cuda")
        y = m.forward(x, self.work.launch if self.work else (lambda: None))
        y.argmax(-1).cpu()  # the answer goes back to the client: a synchronization
        m.ready = None  # after the first request the copies are done: later ones wait for nothing
        return y

    def request(self, k, arrival):
        """Serves a request that arrived at `arrival` (s since t0); its latency (s) or None (failed).
        With --tandem-requests tandem is told of its arrival and its answer (policy slo and fill
        protect what it launches in between)."""
        if not self.api:
            return self.serve(k, arrival)
        begun = self.api[0](int((self.t0 + arrival) * 1e9))
        try:
            return self.serve(k, arrival)
        finally:
            self.api[1](begun)

    def serve(self, k, arrival):
        m = self.models[k]
        how = self.ensure(m)
        if how is False:
            self.event(event="request", model=k, failed=True)
            return None
        self.answer(m)
        m.last_used = self.now()
        latency = m.last_used - arrival
        if how:  # a load: allocation (host time) and copies (GPU time)
            self.load_ms.append(m.alloc_ms + m.copied[0].elapsed_time(m.copied[1]))
            self.first_ms[how].append((time.monotonic() - m.load_started) * 1e3)
            self.event(event="load", model=k, loading=how, loaded=[o.index for o in self.loaded()])
        self.event(event="request", model=k, arrival=round(arrival, 4), done=round(m.last_used, 4),
                   ms=round(latency * 1e3, 3), cold=bool(how))
        return latency


def measure(server, loads=3, requests=5):
    """Model 0 loaded `loads` times as the server loads it, each followed by `requests` requests:
    (service time: the warm requests' mean, a cold start's extra latency: the median first
    request's latency less that) in ms. Nothing is counted and model 0 is left unloaded: this runs
    before serving."""
    m = server.models[0]
    cold, warm = [], []
    for _ in range(loads):
        t = time.monotonic()
        server.ensure(m)
        server.answer(m)
        cold.append((time.monotonic() - t) * 1e3)
        for _ in range(requests):
            t = time.monotonic()
            server.answer(m)
            warm.append((time.monotonic() - t) * 1e3)
        m.gpu = m.gpu_flat = m.ready = None
        server.torch.cuda.empty_cache()
    server.cold_starts = server.loaded_high = 0
    server.load_ms, server.first_ms = [], {k: [] for k in server.first_ms}
    service = sum(warm) / len(warm)
    return service, max(0.0, sorted(cold)[len(cold) // 2] - service)


def percentile(values, q):
    v = sorted(values)
    return round(v[min(len(v) - 1, int(q * (len(v) - 1) + 0.5))], 3) if v else None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", type=int, default=3, help="number of models (default 3)")
    ap.add_argument("--model-mb", type=float, default=64, help="each model's weights, MiB (default 64)")
    ap.add_argument("--layers", type=int, default=8, help="Linear layers per model (default 8)")
    ap.add_argument("--layer-gpu-ms", type=float, default=0.0,
                    help="GPU time added to each layer's forward (large element-wise kernels, gpu_time.py): a "
                         "larger model's compute (default 0)")
    ap.add_argument("--batch", type=int, default=4, help="inputs per request (default 4)")
    ap.add_argument("--seed", type=int, default=1, help="weights and arrivals (default 1)")
    ap.add_argument("--rate", type=float, default=0.0, help="Poisson arrivals per second, all models together")
    ap.add_argument("--trace", choices=("light", "heavy", "burst", "maf"),
                    help="SIRIUS's LIGHT, HEAVY or BURST rate trace, or maf (synthetic), instead of --rate")
    ap.add_argument("--rate-scale", type=float, default=1.0, help="multiplies the trace's rates (default 1)")
    ap.add_argument("--interval-s", type=float, default=20.0, help="the trace's interval (default 20)")
    ap.add_argument("--seconds", type=float, default=0.0, help="serve for this long")
    ap.add_argument("--requests", type=int, default=0, help="or serve this many requests")
    ap.add_argument("--slo-ms", type=float, default=0.0, help="latency target: the summary's slo_attainment")
    ap.add_argument("--idle-ms", type=float, default=None,
                    help="T_idle: release a model not requested for this long (default TANDEM_MEM_IDLE_MS, else 30000)")
    ap.add_argument("--target-compliance", type=float, default=0.0,
                    help="choose T_idle (and the W to set) with SIRIUS's queueing model for this share of requests "
                         "within --slo-ms, from the service and load times measured at start")
    ap.add_argument("--timer-model", choices=("exponential", "fixed"), default="exponential",
                    help="how the queueing model treats T_idle: as SIRIUS does (exponential, conservative; default) or "
                         "as this server's timer (fixed)")
    ap.add_argument("--adjust-ms", type=float, default=0.0,
                    help="for the model: training's memory adjustment time, paid by cold starts W does not cover")
    ap.add_argument("--loading", choices=("pipelined", "sequential", "alternate"), default="pipelined",
                    help="how a model is loaded (default pipelined)")
    ap.add_argument("--linger-s", type=float, default=0.0,
                    help="after the last request, go on releasing idle models for up to this long; a 'drained' "
                         "line when none is loaded (default 0)")
    ap.add_argument("--log-events", action="store_true", help="a JSON line per load, release and request")
    ap.add_argument("--tandem-requests", action="store_true",
                    help="tell tandem when each request arrives and is answered (include/tandem/client.h)")
    a = ap.parse_args()
    if (a.models < 1 or a.model_mb <= 0 or a.layers < 1 or a.layer_gpu_ms < 0 or a.batch < 1 or a.rate < 0
            or (a.rate > 0) == bool(a.trace) or (a.seconds > 0) == (a.requests > 0) or a.slo_ms < 0
            or not 0 <= a.target_compliance < 1 or (a.target_compliance and not a.slo_ms)
            or (a.target_compliance and a.idle_ms is not None) or a.rate_scale <= 0):
        ap.error("one of --rate / --trace and one of --seconds / --requests; sizes and --rate-scale > 0; "
                 "--target-compliance in (0, 1) needs --slo-ms and excludes --idle-ms")
    if a.idle_ms is None and not a.target_compliance:
        a.idle_ms = float(os.environ.get("TANDEM_MEM_IDLE_MS", "30000"))

    import torch
    from torch import nn
    if not torch.cuda.is_available():
        print("model_server.py: no CUDA device", file=sys.stderr)
        return 1
    began = time.monotonic()
    with torch.inference_mode():
        models = [Model(torch, nn, k, a.model_mb, a.layers, a.seed) for k in range(a.models)]
        server = Server(torch, a, models)
        # cuBLAS, the kernels and the allocator's first segments come with the first load and
        # request: a start-up cost, not any model's cold start.
        measure(server, loads=1, requests=1)
        trace = RateTrace(a.trace, a.interval_s, a.seed + 1, a.rate_scale) if a.trace else None
        rate = a.rate or trace.mean(a.seconds or 10 * a.interval_s)
        chosen = {"idle_ms": a.idle_ms, "watermark_mb": None}
        if a.target_compliance:
            service_ms, load_ms = measure(server)
            chosen = sirius_model.search(rate, service_ms, load_ms, a.model_mb, a.models, a.slo_ms,
                                         a.target_compliance, a.adjust_ms, timer=a.timer_model)
            chosen.update(measured_service_ms=round(service_ms, 3), measured_load_ms=round(load_ms, 3), rate=round(rate, 3))
            print(json.dumps({"sirius_model": chosen}), flush=True)
            if not chosen["feasible"]:
                print(f"model_server.py: no T_idle and W reach {a.target_compliance} within {a.slo_ms} ms "
                      f"(at most {chosen['max_compliance']})", file=sys.stderr)
                return 2
            print(f"model_server.py: T_idle {chosen['idle_ms']} ms; set TANDEM_MEM_WATERMARK={chosen['watermark_mb']}M "
                  f"for tandemd (predicted compliance {chosen['compliance']})", file=sys.stderr)
        server.idle_s = chosen["idle_ms"] / 1e3
        rng = random.Random(a.seed)
        pick = trace.chooser(a.models, a.seed + 2) if trace else (lambda r=random.Random(a.seed + 2): r.randrange(a.models))
        latencies, failed = [], 0
        print(json.dumps({"ready": round(time.time(), 4), "warmup_s": round(time.monotonic() - began, 3),
                          "loaded": len(server.loaded())}), flush=True)
        server.t0 = time.monotonic()
        next_arrival, done = 0.0, 0
        while a.seconds and server.now() < a.seconds or a.requests and done < a.requests:
            next_arrival += rng.expovariate(trace.at(next_arrival) if trace else a.rate)
            if a.seconds and next_arrival >= a.seconds:
                break
            # Idle models go while waiting, on time: their memory is what training gets back.
            while (wait := next_arrival - server.now()) > 0:
                time.sleep(min(wait, server.release_idle() + 1e-4))
            server.release_idle()
            latency = server.request(pick(), next_arrival)
            done += 1
            if latency is None:
                failed += 1
            else:
                latencies.append(latency * 1e3)
        elapsed = server.now()
        linger_end = time.monotonic() + a.linger_s
        while a.linger_s and server.loaded() and time.monotonic() < linger_end:
            time.sleep(min(max(0.0, linger_end - time.monotonic()), server.release_idle() + 1e-4))
            server.release_idle()
        if a.linger_s:
            server.event(event="drained", loaded=len(server.loaded()))
            time.sleep(max(0.0, linger_end - time.monotonic()))
    out = {"example": "model-server", "requests": done, "failed": failed, "seconds": round(elapsed, 3),
           "p50_ms": percentile(latencies, 0.5), "p95_ms": percentile(latencies, 0.95),
           "p99_ms": percentile(latencies, 0.99), "slo_ms": a.slo_ms,
           "slo_attainment": round(sum(l <= a.slo_ms for l in latencies) / len(latencies), 4)
           if a.slo_ms and latencies else None,
           "mode": f"trace-{a.trace}" if a.trace else "poisson", "rate": round(rate, 3), "models": a.models,
           "model_mb": a.model_mb, "layers": a.layers, "loading": a.loading, "cold_starts": server.cold_starts,
           "idle_releases": server.idle_releases, "evictions": server.evictions, "loaded_high": server.loaded_high,
           "load_p50_ms": percentile(server.load_ms, 0.5), "load_max_ms": round(max(server.load_ms), 3)
           if server.load_ms else None,
           "cold_request_p50_ms": {k: percentile(v, 0.5) for k, v in server.first_ms.items() if v},
           "cold_request_ms": {k: [round(x, 1) for x in v] for k, v in server.first_ms.items() if v},
           "idle_ms": chosen["idle_ms"], "watermark_mb": chosen["watermark_mb"]}
    if a.target_compliance:
        out.update(predicted_compliance=chosen["compliance"], measured_service_ms=chosen["measured_service_ms"],
                   measured_load_ms=chosen["measured_load_ms"])
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
