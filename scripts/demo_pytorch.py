#!/usr/bin/env python3
"""The demo's scenarios with real PyTorch programs (scripts/demo.sh --workload pytorch):
examples/pytorch/train.py as the training job, examples/pytorch/serve.py as the inference
server, on the real GPU or the simulated one (whichever demo.sh chose).

usage: demo_pytorch.py BUILD_DIR OUT_DIR SECONDS fill|slo|memory|all

fill and slo: the two programs start once under libtandem.so and warm up (loading cuBLAS and
cuDNN takes seconds of CPU, tens on a busy machine); then the configurations follow one
another while they run, each for SECONDS: Exclusive training (inference paused), Exclusive
inference (training paused), Co-Exec (both, no tandemd: libtandem.so fails open and gates
nothing, as if tandem were not there) and tandem (both, beside tandemd). A program's load is
switched by its pause file (--pause-file), and figures are read from its per-step and
per-request lines in each window (the harness of tests/e2e/torch_policy_e2e.py).
memory: train.py (its steps through tandem_microbatch's runner) beside model_server.py on SIRIUS's
traces, Infer-only, Train-only, static 50/50 and 75/25, TaskSwitch and tandem's pool, 4 x SECONDS
each (scripts/demo_memory_pytorch.py).
"""
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "e2e"))
from e2e_util import Env  # noqa: E402
import torch_policy_e2e as harness  # noqa: E402
import demo_memory_pytorch  # noqa: E402  (beside this file)


def percentile(records, q):
    ms = sorted(r["ms"] for r in records)
    return ms[min(len(ms) - 1, int(q * len(ms)))] if ms else float("nan")


def fill(env, seconds, out):
    """Training first: serve.py as a batch filler in training's data-loading bubbles."""
    train, infer = harness.start_pair(env, harness.TRAIN, harness.FILLER, "batch-inference")
    rows = {}
    try:
        train.run(True)
        rows["Exclusive training"] = harness.window(seconds)
        train.run(False)
        infer.run(True)
        rows["Exclusive inference"] = harness.window(seconds)
        train.run(True)
        rows["Co-Exec"] = harness.window(seconds)
        status = {}

        def tandem_window():
            w = harness.window(seconds)
            status.update(env.status() or {})
            return w

        rows["tandem"] = harness.with_daemon(env, "fill", (train, infer), tandem_window)
        train.stop()
        infer.stop()
    finally:
        train.kill()
        infer.kill()
    ex_t = harness.steps_per_s(train, rows["Exclusive training"])
    ex_reqs = infer.between(*rows["Exclusive inference"])
    ex_i = len(ex_reqs) / (rows["Exclusive inference"][1] - rows["Exclusive inference"][0])
    print()
    print(f"{'configuration':<14}{'training':>10}{'inference':>11}{'infer p95 ms':>14}{'bubble use':>12}")
    print(f"{'Exclusive':<14}{1.0:>10.3f}{1.0:>11.3f}{percentile(ex_reqs, 0.95):>14.2f}{'-':>12}")
    for name in ("Co-Exec", "tandem"):
        w = rows[name]
        t = harness.steps_per_s(train, w)
        reqs = infer.between(*w)
        i = len(reqs) / (w[1] - w[0])
        idle = 1.0 - t * harness.TRAIN_GPU_S
        use = i / ex_i / idle if idle > 0 else 0.0
        print(f"{name:<14}{t / ex_t:>10.3f}{i / ex_i:>11.3f}{percentile(reqs, 0.95):>14.2f}{use:>12.2f}")
    print(f"(throughputs divided by Exclusive's {ex_t:.2f} steps/s and {ex_i:.1f} requests/s; bubble use, as "
          f"SpecInF counts it: the filler's throughput over its Exclusive throughput times the share of time "
          f"training leaves the GPU idle (1 - steps/s x {harness.TRAIN_GPU_S * 1e3:g} ms))")
    for g in status.get("gpus", []):
        print(f"tandemd: {g['bubbles']} bubbles of {g['mean_bubble_ms']:.1f} ms mean between busy periods of "
              f"{g['mean_busy_ms']:.1f} ms; filler gate waits "
              + ", ".join(str(s["gate_waits"]) for s in g["slots"] if s["pid"] == infer.p.pid))


def slo(env, seconds, out):
    """Inference first: serve.py as online inference (Poisson arrivals), tandemd --policy slo."""
    online = [*harness.ONLINE, "--slo-ms", str(harness.SLO_MS)]
    train, infer = harness.start_pair(env, harness.SLO_TRAIN, online, "inference", TANDEM_SLO_MS=str(harness.SLO_MS))
    rows = {}
    try:
        train.run(True)
        rows["Exclusive training"] = harness.window(seconds)
        train.run(False)
        infer.run(True)
        rows["Exclusive"] = harness.window(seconds)
        train.run(True)
        rows["Co-Exec"] = harness.window(seconds)
        w = harness.with_daemon(env, "slo", (train, infer), lambda: harness.window(seconds + 2))
        rows["tandem"] = (max(w[0], w[1] - seconds), w[1])  # after the controller's first periods
        train.stop()
        infer.stop()
    finally:
        train.kill()
        infer.kill()
    ex_t = harness.steps_per_s(train, rows["Exclusive training"])
    ex = infer.between(*rows["Exclusive"])
    ex_i = len(ex) / (rows["Exclusive"][1] - rows["Exclusive"][0])
    base = [percentile(ex, q) for q in (0.5, 0.95, 0.99)]
    print()
    print(f"inference-first: latency target p99 <= {harness.SLO_MS} ms (TANDEM_SLO_MS)")
    print(f"{'configuration':<14}{'p50':>8}{'p95':>8}{'p99':>8}{'SLO att.':>10}{'training':>10}{'inference':>11}")
    for name in ("Exclusive", "Co-Exec", "tandem"):
        w = rows[name]
        reqs = infer.between(*w)
        lat = [percentile(reqs, q) / b for q, b in zip((0.5, 0.95, 0.99), base)]
        att = sum(r["ms"] <= harness.SLO_MS for r in reqs) / max(1, len(reqs))
        t = 1.0 if name == "Exclusive" else harness.steps_per_s(train, w) / ex_t
        i = len(reqs) / (w[1] - w[0]) / ex_i
        print(f"{name:<14}{lat[0]:>8.2f}{lat[1]:>8.2f}{lat[2]:>8.2f}{att:>10.3f}{t:>10.3f}{i:>11.3f}")
    print(f"(latencies divided by Exclusive's {base[0]:.1f} / {base[1]:.1f} / {base[2]:.1f} ms; throughputs by "
          f"Exclusive's {ex_t:.2f} steps/s and {ex_i:.1f} requests/s)")


def main():
    build, out, seconds, scenario = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
    os.makedirs(out, exist_ok=True)
    env = Env(build)
    # demo.sh chose the GPU: the simulated one is already on the library path when there is no real one.
    env.base = dict(os.environ, TANDEM_SOCKET=env.socket)
    if scenario == "zico":
        print("demo pytorch: the zico scenario sizes the simulated GPU's memory around train-sim's activations: "
              "run it with --workload sim", file=sys.stderr)
        return 2
    for name, run in (("fill", fill), ("slo", slo)):
        if scenario in (name, "all"):
            print(f"\ndemo pytorch: scenario {name} (the programs warm up first)")
            run(env, seconds, out)
    if scenario in ("memory", "all"):
        print(f"\ndemo pytorch: scenario memory (SIRIUS's four traces, six configurations, {4 * seconds:g} s each)")
        return demo_memory_pytorch.scenario(build, os.path.join(out, "memory-pytorch"), 4 * seconds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
