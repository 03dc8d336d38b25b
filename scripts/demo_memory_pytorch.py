#!/usr/bin/env python3
"""The memory scenario with PyTorch (scripts/demo.sh --workload pytorch --scenario memory;
docs/memory.md, "The memory scenario with PyTorch"): SIRIUS's comparison on one GPU of 1 GiB.

usage: demo_memory_pytorch.py BUILD_DIR OUT_DIR SECONDS [TRACE ...]   (traces: light heavy burst maf)

Training: examples/pytorch/train.py, one step of --batch samples run through tandem_microbatch's
runner (--micro-batches 1: it gives live memory back when asked, and goes on with more, smaller
micro-batches when memory is short). Inference: examples/pytorch/model_server.py, six models of
96 MiB loaded on first request and released after T_idle without requests, the trace's
arrivals, a 100 ms latency target. T_idle and the watermark W come, per trace, from SIRIUS's
queueing model (examples/pytorch/sirius_model.py) for TANDEM_DEMO_TARGET_COMPLIANCE (0.95) of
requests within the target, with the service and cold-start times the server measures alone
first on this machine (calibrate()), never below 1 s and 64 MiB (the model's queue per model
makes its T_idle a lower bound for a server with one queue). Both run on PyTorch's stream-ordered backend
(TANDEM_MEM_TORCH_BACKEND=async), under libtandem.so beside tandemd in every configuration; only
how memory is shared differs:

  Infer-only    the server alone, 1 GiB (TANDEM_MEM_LIMIT)
  Train-only    training alone, 1 GiB
  static 50/50  each process a quota of 512 MiB
  static 75/25  the server 768 MiB, training 256 MiB
  TaskSwitch    temporal sharing (PipeSwitch's, as SIRIUS compares it): one pool of 1 GiB, and
                training stops while the server holds a model (this harness pauses it from the
                server's first load to the release of its last model)
  tandem        one pool of 1 GiB (TANDEM_MEM_POOL): the server's loads take memory from
                training, which discards the micro-batch that runs and regrows when it comes back

tandemd runs policy slo with the 100 ms target (TANDEM_SLO_MS) in every configuration, and the
server tells it of each request (--tandem-requests). Training's steps are GPU-bound (--gpu-ms 40
of element-wise kernels and a synchronization per step), as on a GPU, so that its host work
does not take the CPU the server needs on a small machine.

Each configuration runs SECONDS of the trace (arrival rates per 2 s interval; the machine's share
TANDEM_DEMO_RATE_SCALE, default 1; TANDEM_DEMO_CONFIGS=tandem,... runs only those besides the two
alone). Training throughput is samples per second while the server
serves, over Train-only's. Compliance counts failed requests as missed. Handover: tandemd's time
from an inference acquisition to its answer, for those that waited for training (its histogram
tandem_pool_handover_duration_seconds: p50 and p99 as the bucket bounds they fall under).
"""
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "e2e"))
from e2e_util import free_port  # noqa: E402

PYTHON = sys.executable
EXAMPLES = os.path.join(ROOT, "examples", "pytorch")
TRACES = ("light", "heavy", "burst", "maf")
SLO_MS = 100
MIB = 1 << 20
# name: (training's quota, the server's quota, one pool, training paused while the server holds a model)
CONFIGS = {
    "Infer-only": (None, "1G", False, False),
    "Train-only": ("1G", None, False, False),
    "static 50/50": ("512M", "512M", False, False),
    "static 75/25": ("256M", "768M", False, False),
    "TaskSwitch": ("1G", "1G", True, True),
    "tandem": ("1G", "1G", True, False),
}
# GPU-bound steps: 40 ms of element-wise kernels, then a synchronization (--sleep-ms); a batch
# of 640 peaks at about 490 MiB of tensors at k = 1 (torch.cuda.max_memory_allocated, alone).
TRAIN = ["--seconds", "100000", "--replays", "0", "--batch", "640", "--dim", "128", "--micro-batches", "1",
         "--gpu-ms", "40", "--kernel-ms", "0.25", "--sleep-ms", "1", "--warmup-steps", "1", "--log-steps"]
SERVER = ["--models", "6", "--model-mb", "96", "--interval-s", "2", "--slo-ms", str(SLO_MS),
          "--log-events", "--tandem-requests"]
# SIRIUS's T_idle and W per trace: the queueing model's smallest pair that reaches this share of
# requests within the SLO (calibrate()), never below the fixed pair. The model takes each model's
# requests as a queue of its own, but this server answers all models' requests in one queue, so
# a cold start delays the other models' requests too: the model's T_idle is a lower bound here.
# Taken as it is, its 142 ms on HEAVY (102 requests/s) let the server's queue collapse behind
# cold starts (Infer-only: 0.3% within the target, against 93% with 1 s).
TARGET = float(os.environ.get("TANDEM_DEMO_TARGET_COMPLIANCE", "0.95"))
FIXED_IDLE_MS, FIXED_WATERMARK_MB = 1000, 64


class Program:
    """A program under libtandem.so whose JSON lines are read as they come, with their arrival times."""

    def __init__(self, args, env, name, out, on_line=None):
        self.lines, self.on_line = [], on_line
        self.err = open(os.path.join(out, f"{name}.err"), "w")
        self.log = open(os.path.join(out, f"{name}.jsonl"), "w")  # its JSON lines, as they came
        self.p = subprocess.Popen([PYTHON, *args], env=env, stdout=subprocess.PIPE, stderr=self.err, text=True)
        self.reader = threading.Thread(target=self.read, daemon=True)
        self.reader.start()

    def read(self):
        for line in self.p.stdout:
            if line.startswith("{"):
                record = json.loads(line)
                self.lines.append((time.time(), record))
                self.log.write(line)
                if self.on_line:
                    self.on_line(record)

    def first(self, key, seconds):
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and self.p.poll() is None:
            hit = next((r for _, r in self.lines if key in r), None)
            if hit:
                return hit
            time.sleep(0.05)
        return next((r for _, r in self.lines if key in r), None)

    def summary(self, example):
        return next((r for _, r in reversed(self.lines) if r.get("example") == example), None)

    def stop(self, seconds=60):
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGINT)  # train.py prints its summary on Ctrl-C
        try:
            self.p.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
        self.reader.join(timeout=5)
        self.err.close()
        self.log.close()


def handover_figures(port):
    """tandemd's handover histogram: (count, p50 bound ms, p99 bound ms); None without handovers."""
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    except OSError:
        return None
    buckets = []
    for line in text.splitlines():
        if line.startswith("tandem_pool_handover_duration_seconds_bucket"):
            le = line.split('le="')[1].split('"')[0]
            buckets.append((float("inf") if le == "+Inf" else float(le), float(line.rsplit(" ", 1)[1])))
    total = max((n for _, n in buckets), default=0)
    if not total:
        return None

    def bound(q):
        return next(le for le, n in sorted(buckets) if n >= q * total) * 1e3
    return int(total), bound(0.5), bound(0.99)


def calibrate(build, out, trace, seconds, rate_scale):
    """T_idle (ms) and W (MiB) for the trace from SIRIUS's queueing model: model_server.py alone
    under libtandem (1 GiB) measures its service and cold-start times on this machine and asks
    sirius_model.py for the smallest pair that reaches TARGET within the SLO at the trace's mean
    rate (the fixed-timer variant: the server's timer is exact). Never below 1 s and 64 MiB."""
    env = dict(os.environ, TANDEM_MEM_LIMIT="1G", TANDEM_MEM_TORCH_BACKEND="async",
               LD_PRELOAD=os.path.join(build, "lib", "libtandem.so"))
    server = Program([os.path.join(EXAMPLES, "model_server.py"), *SERVER, "--trace", trace, "--seconds", str(seconds),
                      "--rate-scale", str(rate_scale), "--target-compliance", str(TARGET), "--timer-model", "fixed"],
                     env, f"{trace}-calibration", out)
    chosen = (server.first("sirius_model", 300) or {}).get("sirius_model") or {}
    server.stop()
    if not chosen.get("feasible"):
        print(f"demo memory pytorch: {trace}: no T_idle and W reach {TARGET} in the queueing model; "
              f"T_idle {FIXED_IDLE_MS} ms, W {FIXED_WATERMARK_MB} MiB", flush=True)
        return FIXED_IDLE_MS, FIXED_WATERMARK_MB, chosen
    idle_ms, watermark_mb = max(int(chosen["idle_ms"]), FIXED_IDLE_MS), max(int(chosen["watermark_mb"]), FIXED_WATERMARK_MB)
    print(f"demo memory pytorch: {trace}: the queueing model: T_idle {chosen['idle_ms']} ms, W {chosen['watermark_mb']} "
          f"MiB (service {chosen['measured_service_ms']} ms, cold start {chosen['measured_load_ms']} ms, "
          f"{chosen['rate']} requests/s, predicted compliance {chosen['compliance']}); used: T_idle {idle_ms} ms, "
          f"W {watermark_mb} MiB", flush=True)
    return idle_ms, watermark_mb, chosen


def run(build, out, name, trace, seconds, rate_scale, idle_ms=FIXED_IDLE_MS, watermark_mb=FIXED_WATERMARK_MB):
    train_quota, server_quota, pool, switch = CONFIGS[name]
    tag = f"{trace}-{name.replace('/', '-').replace(' ', '-')}"
    sock, port = os.path.join(out, f"{tag}.sock"), free_port()
    shared = dict(os.environ, TANDEM_SOCKET=sock, TANDEM_MEM_TORCH_BACKEND="async", TANDEM_MEM_CHUNK="32M",
                  TANDEM_MEM_WATERMARK=f"{watermark_mb}M",
                  LD_PRELOAD=os.path.join(build, "lib", "libtandem.so"))
    if pool:
        shared["TANDEM_MEM_POOL"] = "1"
    with open(os.path.join(out, f"{tag}-tandemd.log"), "w") as log:
        daemon = subprocess.Popen([os.path.join(build, "bin", "tandemd"), "--foreground", "--socket", sock, "--log",
                                   "info", "--policy", "slo", "--metrics", f"127.0.0.1:{port}"],
                                  env=dict(shared, TANDEM_SLO_MS=str(SLO_MS)), stderr=log)
    train = server = None
    result = {}
    pause = os.path.join(out, f"{tag}.pause")
    try:
        for _ in range(100):
            if os.path.exists(sock):
                break
            time.sleep(0.05)
        if train_quota:
            env = dict(shared, TANDEM_ROLE="training", TANDEM_MEM_LIMIT=train_quota,
                       TANDEM_STATS_FILE=os.path.join(out, f"{tag}-train-stats.json"))
            train = Program([os.path.join(EXAMPLES, "train.py"), *TRAIN, "--pause-file", pause], env,
                            f"{tag}-train", out)
            if not train.first("ready", 300):
                raise SystemExit(f"demo memory pytorch: training did not start ({out}/{tag}-train.err)")
        if not server_quota:  # Train-only: a window of the same length
            began = time.time()
            time.sleep(seconds)
            result["train"] = train_window(train, began, time.time())
            return result

        def taskswitch(record):  # training stops while the server holds a model
            if record.get("event") == "load":
                open(pause, "w").close()
            elif record.get("event") == "release" and not record.get("loaded"):
                try:
                    os.unlink(pause)
                except FileNotFoundError:
                    pass

        env = dict(shared, TANDEM_ROLE="inference", TANDEM_MEM_LIMIT=server_quota,
                   TANDEM_STATS_FILE=os.path.join(out, f"{tag}-server-stats.json"))
        server = Program([os.path.join(EXAMPLES, "model_server.py"), *SERVER, "--trace", trace, "--seconds",
                          str(seconds), "--rate-scale", str(rate_scale), "--idle-ms", str(idle_ms)], env,
                         f"{tag}-server", out,
                         taskswitch if switch else None)
        ready = server.first("ready", 300)
        if not ready:
            raise SystemExit(f"demo memory pytorch: the server did not start ({out}/{tag}-server.err)")
        server.p.wait(timeout=seconds + 300)
        server.stop()
        served = server.summary("model-server")
        if not served:
            raise SystemExit(f"demo memory pytorch: the server ended without a summary ({out}/{tag}-server.err)")
        result.update(server=served, handover=handover_figures(port))
        if train:
            result["train"] = train_window(train, ready["ready"], ready["ready"] + served["seconds"])
        return result
    finally:
        for p in (server, train):
            if p:
                p.stop()
        if train and "train" in result:
            result["train"]["summary"] = train.summary("train")  # discards, micro-batches
        daemon.terminate()
        daemon.wait()
        if os.path.exists(pause):
            os.unlink(pause)


def train_window(train, began, ended):
    """Training's samples per second between two Unix times, from its per-step lines."""
    batch = int(TRAIN[TRAIN.index("--batch") + 1])
    steps = sum(1 for _, r in train.lines if "step" in r and began <= r["t"] <= ended)
    return {"samples_per_s": steps * batch / max(ended - began, 1e-9), "steps": steps}


def compliance(served):
    if not served["requests"]:
        return float("nan")
    met = (served["slo_attainment"] or 0.0) * (served["requests"] - served["failed"])
    return met / served["requests"]


def report(trace, results):
    alone_t = results["Train-only"]["train"]["samples_per_s"] or 1.0
    alone_c = compliance(results["Infer-only"]["server"])
    chosen = results["sirius_model"]
    print(f"\ntrace {trace.upper()}: {results['Infer-only']['server']['requests']} requests to Infer-only "
          f"(mean {results['Infer-only']['server']['rate']:.1f}/s); SLO {SLO_MS} ms; T_idle {chosen['idle_ms']} ms, "
          f"W {chosen['watermark_mb']} MiB")
    print(f"{'configuration':<14}{'training':>9}{'p99 ms':>9}{'SLO':>7}{'x Infer':>9}{'cold':>6}{'failed':>8}"
          f"{'handovers':>11}{'p50 ms':>8}{'p99 ms':>8}")
    for name in CONFIGS:
        r = results[name]
        t = r.get("train", {}).get("samples_per_s")
        s = r.get("server")
        h = r.get("handover")
        cols = [f"{t / alone_t:>9.2f}" if t is not None else f"{'-':>9}"]
        if s:
            c = compliance(s)
            cols += [f"{s['p99_ms'] or float('nan'):>9.1f}", f"{c:>7.3f}", f"{c / alone_c if alone_c else 0:>9.2f}",
                     f"{s['cold_starts']:>6}", f"{s['failed']:>8}"]
        else:
            cols += [f"{'-':>9}", f"{'-':>7}", f"{'-':>9}", f"{'-':>6}", f"{'-':>8}"]
        cols += [f"{h[0]:>11}", f"{h[1]:>8g}", f"{h[2]:>8g}"] if h else [f"{'-':>11}", f"{'-':>8}", f"{'-':>8}"]
        print(f"{name:<14}" + "".join(cols))
    tandem, sp50 = results["tandem"], results["static 50/50"]
    if not tandem or not sp50:
        return
    c, t = compliance(tandem["server"]), tandem["train"]["samples_per_s"]
    print(f"tandem: compliance {c / alone_c if alone_c else 0:.2f} x Infer-only's (goal >= 0.95), training "
          f"{t / max(sp50['train']['samples_per_s'], 1e-9):.2f} x static 50/50's (goal >= 1)")


def scenario(build, out, seconds, traces=TRACES):
    """Every configuration on every trace, SECONDS each; the tables, and OUT/memory-pytorch.json."""
    if any(t not in TRACES for t in traces):
        print(f"demo memory pytorch: traces are {', '.join(TRACES)}", file=sys.stderr)
        return 2
    rate_scale = float(os.environ.get("TANDEM_DEMO_RATE_SCALE", "1"))
    only = [c for c in os.environ.get("TANDEM_DEMO_CONFIGS", "").split(",") if c]
    os.makedirs(out, exist_ok=True)
    alone = None
    everything = {}
    for trace in traces:
        idle_ms, watermark_mb, model = calibrate(build, out, trace, seconds, rate_scale)
        results = {"sirius_model": {"model": model, "idle_ms": idle_ms, "watermark_mb": watermark_mb}}
        for i, name in enumerate(CONFIGS):
            if only and name not in only and name not in ("Infer-only", "Train-only"):
                results[name] = {}
                continue
            if name == "Train-only" and alone:
                results[name] = alone
                continue
            print(f"demo memory pytorch: {trace} {i + 1}/{len(CONFIGS)} {name}", flush=True)
            results[name] = run(build, out, name, trace, seconds, rate_scale, idle_ms, watermark_mb)
            if name == "Train-only":
                alone = results[name]
        everything[trace] = results
        report(trace, results)
    with open(os.path.join(out, "memory-pytorch.json"), "w") as f:
        json.dump(everything, f, indent=1)
    return 0


def main():
    return scenario(sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4:] or TRACES)


if __name__ == "__main__":
    sys.exit(main())
