#!/usr/bin/env python3
"""Inference first under realistic training (policy slo), on the simulated GPU, in time slicing
and MPS in one run each. Prints Exclusive, Co-Exec and tandem: inference p50/p99 and their
ratio to Exclusive, and training's throughput retained.

Training: 20 x 1 ms kernels on the whole GPU, a 6 ms NCCL-named all-reduce kernel, 4 ms of host
work per step. Online inference: 4 x 1 ms kernels per request on half the GPU, Poisson arrivals
at 100 requests/s, latency from arrival. The target is a multiple of Exclusive's p99 in whole
milliseconds (--target-ratio, by sharing mode: 1.2 time slicing, 1.1 MPS).

usage: scripts/bench_slo.py [BUILD_DIR] [--seconds S] [--sharing timeslice,mps] [--json]
                            [--setting NAME=VALUE ...]   (TANDEM_* settings for every process)"""
import json
import math
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "e2e"))
from e2e_util import Env, finish  # noqa: E402

TRAIN = ["--compute-kernels", "20", "--kernel-us", "1000", "--comm-us", "6000", "--gap-us", "4000"]
INFER = ["--kernels", "4", "--kernel-us", "1000", "--blocks", "66", "--rate", "100"]
WARMUP_S = 1.5
TARGET_RATIO = {"timeslice": 1.2, "mps": 1.1}
GOALS = {"timeslice": (1.35, 0.3), "mps": (1.10, 0.5)}  # p99 at most x Exclusive, training at least


def target_ms(ratio, exclusive_p99):
    """The issue's target: ratio x Exclusive's p99, in whole milliseconds (rounded down, at least 1)."""
    return max(1, math.floor(ratio * exclusive_p99))


def measure(env, sharing, seconds, settings, ratio=None):
    sim = {"SIMGPU_SHARING": sharing}
    infer = ["--seconds", str(seconds), "--warmup-seconds", str(WARMUP_S), *INFER]
    ex_train = finish(env.start("train-sim", "--seconds", str(seconds), *TRAIN, **sim))
    ex_infer = finish(env.start("infer-sim", *infer, **sim))
    a = env.start("train-sim", "--seconds", str(seconds), *TRAIN, **sim)
    b = env.start("infer-sim", *infer, **sim)
    co_infer, co_train = finish(b), finish(a)
    slo_ms = target_ms(ratio or TARGET_RATIO[sharing], ex_infer["p99_ms"])
    d = env.daemon("slo", **settings)
    a = env.start("train-sim", "--seconds", str(seconds), *TRAIN, role="training", **sim, **settings)
    time.sleep(0.2)
    b = env.start("infer-sim", *infer, "--slo-ms", str(slo_ms), role="inference", TANDEM_SLO_MS=str(slo_ms), **sim,
                  **settings)
    t_infer = finish(b)
    st = env.status()
    t_train = finish(a)
    d.terminate()
    d.wait()
    ex_rate = ex_train["iters_per_s"]
    rows = {}
    for name, tr, inf in (("Exclusive", ex_train, ex_infer), ("Co-Exec", co_train, co_infer), ("tandem", t_train, t_infer)):
        rows[name] = {"p50_ms": inf["p50_ms"], "p99_ms": inf["p99_ms"], "p99_x": inf["p99_ms"] / ex_infer["p99_ms"],
                      "training": tr["iters_per_s"] / ex_rate, "requests": inf["requests"]}
    gpus = (st or {}).get("gpus") or [{}]  # none when every client had gone by then
    slo = gpus[0].get("slo") or {}
    return {"sharing": sharing, "slo_ms": slo_ms, "rows": rows, "status_slo": {k: v for k, v in slo.items() if k != "history"}}


def print_table(m):
    goal_p99, goal_train = GOALS[m["sharing"]]
    print(f"\n{m['sharing']}: target {m['slo_ms']} ms (goal: p99 <= {goal_p99:.2f}x Exclusive, training >= {goal_train})")
    print(f"{'configuration':14} {'p50 ms':>8} {'p99 ms':>8} {'p99 x':>7} {'training':>9}")
    for name, r in m["rows"].items():
        print(f"{name:14} {r['p50_ms']:8.2f} {r['p99_ms']:8.2f} {r['p99_x']:7.2f} {r['training']:9.3f}")
    t = m["rows"]["tandem"]
    met = t["p99_x"] <= goal_p99 and t["training"] >= goal_train
    print(f"goal {'met' if met else 'NOT met'}")
    if m["status_slo"]:
        print("tandemd:", json.dumps(m["status_slo"], sort_keys=True))


def main():
    args = sys.argv[1:]
    build = args[0] if args and not args[0].startswith("--") else "build"
    seconds = float(args[args.index("--seconds") + 1]) if "--seconds" in args else 8.0
    modes = args[args.index("--sharing") + 1].split(",") if "--sharing" in args else ["timeslice", "mps"]
    settings = {}
    for i, a in enumerate(args):
        if a == "--setting":
            k, v = args[i + 1].split("=", 1)
            settings[k] = v
    env = Env(build)
    results = [measure(env, mode, seconds, settings) for mode in modes]
    for m in results:
        if "--json" in args:
            print(json.dumps(m))
        else:
            print_table(m)


if __name__ == "__main__":
    main()
