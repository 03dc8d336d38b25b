#!/usr/bin/env python3
"""SIRIUS's inference side with PyTorch (docs/memory.md, "The PyTorch model server"):
examples/pytorch/sirius_model.py (the queueing model that picks T_idle and W) and
examples/pytorch/model_server.py (models loaded on first request, pipelined, released after
T_idle, evicted least recently used first).

  queueing   the model's compliance against a discrete-event simulation of the same queue at a
             few points (within 0.01), and against one whose T_idle is a fixed timer (the model
             predicts no more than it: conservative); compliance never falls as T_idle or W grow;
             the search returns the smallest T_idle and W that meet the target; the CLI prints
             what the search returns; the memory demo's T_idle and W are the model's for the
             server's measured figures (scripts/demo_memory_sirius.py). Pure Python: no PyTorch needed.
             The server's traces: LIGHT, HEAVY, BURST and maf rates have the means of their
             distributions (4.5, 94, 31 and 23 requests/s), --rate-scale multiplies them, and
             maf's requests go mostly to a few models (Zipf), the others' uniformly.
  serve      the server under libtandem beside tandemd on the simulated GPU, 3 models of 32 MiB
             under a quota that holds 2: no model is loaded before its first request; models
             idle for T_idle are released and their memory returns (tandemctl mem's bytes in
             use drop); a load that runs out of memory evicts the least recently used model;
             every request is answered, and with --tandem-requests tandemd counts each one.
  calibrated  --target-compliance: the server measures its service and cold-start times and takes
             T_idle from the queueing model (what scripts/demo_memory_pytorch.py relies on): the
             cold start it measures misses a 10 ms target, so the T_idle it prints is positive;
             it runs with the T_idle and W it prints, and they are the model's answer for the
             times it printed (within 1%: they are rounded); a target no setting reaches (an SLO
             below a request's time) exits with status 2, saying so.
  pipelined  the first request after a pipelined load is answered sooner than after
             load-then-run, the two alternating in one run (a time ratio).

usage: model_server_e2e.py BUILD_DIR CASE
"""
import json
import math
import os
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from e2e_util import check, last_json, mem_row, run_case, slots_by_pid  # noqa: E402
from torch_e2e import PYTHON, example, require_torch, run, start  # noqa: E402

sys.path.insert(0, os.path.dirname(example("sirius_model.py")))
import sirius_model as sm  # noqa: E402

MIB = 1 << 20

# Points of the model's space: utilisation from 2% to 60%, alpha from 0 to 1, load times from
# shorter than a service to many.
POINTS = [
    dict(rate=6, service_ms=8, load_ms=40, model_mb=256, models=3, slo_ms=60, idle_ms=300, watermark_mb=256),
    dict(rate=20, service_ms=20, load_ms=100, model_mb=128, models=2, slo_ms=150, idle_ms=200, watermark_mb=0),
    dict(rate=3, service_ms=5, load_ms=50, model_mb=64, models=1, slo_ms=30, idle_ms=500, watermark_mb=16, adjust_ms=20),
    dict(rate=15, service_ms=40, load_ms=30, model_mb=100, models=1, slo_ms=300, idle_ms=100, watermark_mb=50),
]


def queueing(_env):
    for i, p in enumerate(POINTS):
        model = sm.evaluate(**p)["compliance"]
        sim = sm.simulate(**p, requests=200000, seed=10 + i)
        fixed = sm.simulate(**p, requests=200000, seed=20 + i, timer="fixed")
        model_fixed = sm.evaluate(**p, timer="fixed")["compliance"]
        check(abs(model - sim) <= 0.01, f"point {i}: the model's compliance {model:.4f} matches the simulated "
                                        f"queue's {sim:.4f} (within 0.01)")
        check(abs(model_fixed - fixed) <= 0.01 and model <= fixed + 0.01,
              f"point {i}: with a fixed T_idle timer (a server's) the simulated queue's {fixed:.4f} matches the model's "
              f"fixed-timer variant ({model_fixed:.4f}) and is no lower than SIRIUS's exponential model's (within 0.01)")
    p = dict(POINTS[0])
    del p["idle_ms"], p["watermark_mb"]
    by_idle = [sm.evaluate(**p, idle_ms=t, watermark_mb=64)["compliance"] for t in (0, 10, 50, 100, 300, 1000, 5000, math.inf)]
    by_w = [sm.evaluate(**p, idle_ms=300, watermark_mb=w)["compliance"] for w in (0, 32, 128, 384, 700, 768)]
    check(all(b >= a - 1e-12 for a, b in zip(by_idle, by_idle[1:])) and by_idle[-1] > by_idle[0] + 0.05,
          f"compliance grows with T_idle: {[round(c, 4) for c in by_idle]}")
    check(all(b >= a - 1e-12 for a, b in zip(by_w, by_w[1:])) and by_w[-1] > by_w[0] + 0.05,
          f"compliance grows with W: {[round(c, 4) for c in by_w]}")

    target = 0.99
    meets = lambda t, w: sm.evaluate(**p, idle_ms=t, watermark_mb=w)["compliance"] >= target
    t = sm.smallest_idle_ms(p, 64, target)
    check(t is not None and meets(t, 64) and not meets(t - 1, 64),
          f"the smallest T_idle that meets {target} with W = 64 MiB: {t} ms (1 ms less does not)")
    w = sm.smallest_watermark_mb(p, 1000, target)
    check(w is not None and meets(1000, w) and not meets(1000, w - 1),
          f"the smallest W that meets {target} with T_idle = 1 s: {w} MiB (1 MiB less does not)")
    r = sm.search(**p, target=target)
    check(r["feasible"] and meets(r["idle_ms"], r["watermark_mb"]) and not meets(r["idle_ms"] - 1, r["watermark_mb"])
          and (r["watermark_mb"] == 0 or not meets(r["idle_ms"], r["watermark_mb"] - 1)),
          f"the joint search's T_idle and W each are the smallest that meet {target} with the other: {r}")
    tight = dict(p, slo_ms=10)
    r2 = sm.search(**tight, target=target)
    check(not r2["feasible"] and r2["max_compliance"] < target,
          f"an SLO no setting meets is reported infeasible (at most {r2['max_compliance']})")
    traces()
    cli = subprocess.run([sys.executable, example("sirius_model.py"), "--rate", "6", "--service-ms", "8", "--load-ms",
                          "40", "--model-mb", "256", "--models", "3", "--slo-ms", "60", "--target", "0.99"],
                         capture_output=True, text=True, timeout=120)
    out = last_json(cli.stdout)
    print("cli:", json.dumps(out))
    check(cli.returncode == 0 and out == json.loads(json.dumps(r)),
          "the CLI prints the search's result as JSON (idle_ms, watermark_mb, compliance)")
    demo_settings()


def demo_settings():
    """scripts/demo_memory.sh's shared runs take T_idle and W from the model, fed with the server's
    Exclusive run (rate, warm p50, cold-start p50, a timer of exactly T_idle)."""
    alone = {"requests": 372, "elapsed_s": 15.0, "p50_ms": 2.35, "load_p50_ms": 52.0, "model_mb": 96, "models": 6,
             "slo_ms": 100.0}
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "demo_memory_sirius.py")
    with tempfile.TemporaryDirectory() as out:
        with open(os.path.join(out, "exclusive-infer.json"), "w") as f:
            f.write("infer-sim's output\n" + json.dumps(alone) + "\n")
        run = subprocess.run([sys.executable, script, out, "0.99"], capture_output=True, text=True, timeout=120)
        want = sm.search(rate=372 / 15.0, service_ms=2.35, load_ms=52.0, model_mb=96, models=6, slo_ms=100.0,
                         target=0.99, timer="fixed")
        check(run.returncode == 0 and run.stdout.split() == [str(round(want["idle_ms"])), str(round(want["watermark_mb"]))]
              and json.load(open(os.path.join(out, "sirius.json"))) == json.loads(json.dumps(want)),
              f"the memory demo's T_idle and W are the model's for the server's measured figures "
              f"({run.stdout.strip()} against {want['idle_ms']} {want['watermark_mb']}){run.stderr[-300:]}")
        alone["slo_ms"] = 1.0
        with open(os.path.join(out, "exclusive-infer.json"), "w") as f:
            f.write(json.dumps(alone) + "\n")
        run = subprocess.run([sys.executable, script, out, "0.99"], capture_output=True, text=True, timeout=120)
        check(run.returncode != 0 and "reaches no T_idle" in run.stderr and not run.stdout.strip(),
              f"a target the model cannot reach stops the demo with a reason ({run.stderr.strip()[:120]})")


def traces():
    sys.path.insert(0, os.path.dirname(example("model_server.py")))
    from model_server import RateTrace
    n = 20000
    for kind, mean in (("light", math.exp(1.5)), ("heavy", math.exp(4.5 + 0.045)),
                       ("burst", 0.7 * math.exp(1.5) + 0.3 * math.exp(4.5 + 0.045)), ("maf", math.exp(2 + 1.125))):
        got = RateTrace(kind, 1.0, 7).mean(n)
        scaled = RateTrace(kind, 1.0, 7, scale=0.5).mean(n)
        check(abs(got / mean - 1) <= 0.1 and abs(scaled / got - 0.5) <= 1e-9,
              f"trace {kind}: mean rate {got:.1f} requests/s against the distribution's {mean:.1f} (within 10%); "
              f"scaled by 0.5: {scaled:.1f}")
        pick = RateTrace(kind, 1.0, 7).chooser(6, 3)
        counts = [0] * 6
        for _ in range(6000):
            counts[pick()] += 1
        top = max(counts) / 6000
        check(top >= 0.35 if kind == "maf" else top <= 0.2,
              f"trace {kind}: the most requested of 6 models takes {top:.2f} of the requests "
              f"({'Zipf' if kind == 'maf' else 'uniform'})")


def read_lines(p, lines, on_line):
    for line in p.stdout:
        if line.startswith("{"):
            lines.append(json.loads(line))
            on_line(lines[-1])


def serve(env):
    require_torch()
    d = env.daemon()
    model_mb, idle_ms = 32, 250
    # 3 models of 32 MiB (one allocation of 32 MiB each, whole segments of PyTorch's allocator)
    # under a quota that holds two of them and what the process uses besides (cuBLAS: about 66 MiB).
    p = start(env, [example("model_server.py"), "--models", "3", "--model-mb", str(model_mb), "--rate", "8",
                    "--seconds", "12", "--idle-ms", str(idle_ms), "--log-events", "--linger-s", "4",
                    "--tandem-requests"],
              TANDEM_ROLE="inference", TANDEM_MEM_LIMIT="150M")
    env.started.append(p)
    lines, samples, told = [], [], []

    def on_line(e):  # tandem's view of the process's memory at each load and once drained
        if e.get("event") == "drained":
            told.append(slots_by_pid(env.status() or {}).get(p.pid, {}).get("requests"))
        if e.get("event") in ("load", "drained"):
            try:
                row = mem_row(env, p.pid)
            except subprocess.TimeoutExpired:  # a busy machine: this sample is missed, the server goes on
                row = None
            if row:
                samples.append((e["event"], row["bytes_in_use"]))
    reader = threading.Thread(target=read_lines, args=(p, lines, on_line))
    reader.start()
    p.wait(timeout=300)
    reader.join()
    err = p.stderr.read()
    d.terminate()
    d.wait()
    check(p.returncode == 0, f"the server ran under tandem (exit {p.returncode}{': ' + err[-2000:] if p.returncode else ''})")
    summary = lines[-1]
    events = [e for e in lines if "event" in e]
    print("summary:", json.dumps(summary))
    at_load = [b for what, b in samples if what == "load"]
    drained = [b for what, b in samples if what == "drained"]
    check(drained and at_load and max(at_load) - drained[-1] >= model_mb * MIB and events[-1]["reserved_mb"] == 0,
          f"released models' memory returns to the GPU: tandemctl mem's bytes in use "
          f"{max(at_load or [0]) / MIB:.0f} MiB at most at loads, {(drained or [0])[-1] / MIB:.0f} MiB once all were "
          f"released")

    ready = next(e for e in lines if "ready" in e)
    check(ready["loaded"] == 0, "no model is loaded before requests come")
    # Replay the events: what is loaded, when each model was last used.
    loaded, last, first_seen, lru_ok, idle_ok = set(), {}, set(), [], []
    for e in events:
        if e["event"] == "load":
            loaded.add(e["model"])
        elif e["event"] == "request":
            if e["model"] not in first_seen:
                first_seen.add(e["model"])
                check(e["cold"], f"model {e['model']} is loaded at its first request ({e})")
            last[e["model"]] = e["done"]  # when it was answered: the model's last use
        elif e["event"] == "release":
            if e["why"] == "evict":
                lru_ok.append(e["model"] == min(loaded, key=lambda k: last[k]))
            else:
                idle = (e["t"] - last[e["model"]]) * 1e3
                idle_ok.append(idle_ms - 1 <= idle <= idle_ms + 1000 or round(idle))
            loaded.discard(e["model"])
            check(set(e["loaded"]) == loaded, f"a release names the models still loaded ({e}, replayed {loaded})")
    check(len(first_seen) == 3 and summary["cold_starts"] >= 3, f"all 3 models were loaded on demand "
                                                                 f"({summary['cold_starts']} cold starts)")
    check(summary["idle_releases"] >= 3 and all(x is True for x in idle_ok),
          f"models are released after T_idle = {idle_ms} ms without requests, not before "
          f"({summary['idle_releases']} idle releases; idle ms of those outside {idle_ms - 1} to {idle_ms + 1000}: "
          f"{[x for x in idle_ok if x is not True]})")
    check(summary["evictions"] >= 1 and all(lru_ok) and summary["loaded_high"] == 2,
          f"a load that runs out of memory evicts the least recently used model ({summary['evictions']} evictions, "
          f"at most {summary['loaded_high']} models loaded under the quota)")
    requests = [e for e in events if e["event"] == "request"]
    # Until the first tandem_request_begin, tandem counts each launch-to-synchronization cycle as a
    # request: the warm-up's answers (one load, one request: 2 seen) come before it.
    check(told and 0 <= told[0] - summary["requests"] <= 4,
          f"--tandem-requests: tandemd counted the server's requests ({told} for {summary['requests']} and the "
          f"warm-up's few)")
    check(summary["failed"] == 0 and summary["requests"] == len(requests) >= 60 and all("ms" in e for e in requests),
          f"every request is answered ({summary['requests']}, {summary['failed']} failed; p50 {summary['p50_ms']} ms, "
          f"p99 {summary['p99_ms']} ms)")


def calibrated(env):
    require_torch()
    # A 10 ms target: a request that meets a cold start (a 32 MiB load, about 27 ms here) misses
    # it, so reaching 0.9 takes a T_idle that keeps models loaded.
    args = [example("model_server.py"), "--models", "2", "--model-mb", "32", "--rate", "6", "--seconds", "3",
            "--timer-model", "fixed", "--target-compliance", "0.9"]
    r, p = run(env, [*args, "--slo-ms", "10"], tandem=True, TANDEM_ROLE="inference")
    chosen = last_json("\n".join(l for l in p.stdout.splitlines() if "sirius_model" in l))["sirius_model"]
    print("model:", json.dumps(chosen))
    check(chosen["feasible"] and chosen["measured_service_ms"] > 0 and chosen["measured_load_ms"] > 10,
          f"the server measured its service and cold-start times ({chosen})")
    check(chosen["idle_ms"] > 0, f"a cold start misses the target, so models stay loaded a while ({chosen['idle_ms']} ms)")
    check(r["idle_ms"] == chosen["idle_ms"] and r["watermark_mb"] == chosen["watermark_mb"],
          f"the server ran with the T_idle and W it printed ({r['idle_ms']} ms, {r['watermark_mb']} MiB)")
    # The printed inputs are rounded to 3 decimals: the model's answer for them is the same
    # within a percent.
    again = sm.search(chosen["rate"], chosen["measured_service_ms"], chosen["measured_load_ms"], 32, 2, 10, 0.9,
                      timer="fixed")
    check(abs(again["idle_ms"] - r["idle_ms"]) <= max(2, 0.01 * r["idle_ms"]) and again["watermark_mb"] == r["watermark_mb"],
          f"they are the queueing model's for what the server measured (the model: {again['idle_ms']} ms, "
          f"{again['watermark_mb']} MiB, compliance {again['compliance']})")
    e = dict(env.base, LD_PRELOAD=os.path.join(env.build, "lib", "libtandem.so"))
    p = subprocess.run([PYTHON, *args, "--slo-ms", "0.01"], env=e, capture_output=True, text=True, timeout=240)
    check(p.returncode == 2 and "no T_idle and W reach" in p.stderr,
          f"an unreachable target exits with status 2 and says so ({p.returncode}: {p.stderr.strip()[-300:]})")


def pipelined(env):
    require_torch()
    # Copies at 1 GB/s (SIMGPU_PCIE_GBPS takes whole GB/s; 16.8 ms per layer of 16 MiB) and 16 ms
    # of GPU time per layer: load-then-run costs the sum (about 135 + 130 ms), pipelining about one
    # layer's copy plus the compute (about 150 ms): long against the host's share, which a busy
    # machine stretches. T_idle 0: every request is a cold start, pipelined and sequential in turn;
    # the medians of 10 each.
    r, _ = run(env, [example("model_server.py"), "--models", "1", "--model-mb", "128", "--layers", "8",
                     "--layer-gpu-ms", "16", "--rate", "1.2", "--requests", "20", "--idle-ms", "0", "--loading",
                     "alternate"], tandem=True, timeout=300, SIMGPU_PCIE_GBPS="1", TANDEM_ROLE="inference")
    print("summary:", json.dumps(r))
    first = r["cold_request_p50_ms"]  # from the load's start to the answer: no queueing
    ratio = first["pipelined"] / first["sequential"]
    check(r["cold_starts"] == 20 and r["failed"] == 0, f"every request was a cold start ({r['cold_starts']})")
    check(ratio <= 0.8, f"pipelined loading answers a cold start's request in {first['pipelined']:.1f} ms against "
                        f"{first['sequential']:.1f} ms for load-then-run: {ratio:.2f} of it (at most 0.8)")


if __name__ == "__main__":
    t0 = time.monotonic()
    run_case({"queueing": queueing, "serve": serve, "calibrated": calibrated, "pipelined": pipelined})
    print(f"model server e2e {sys.argv[2]}: ok ({time.monotonic() - t0:.0f} s)")
