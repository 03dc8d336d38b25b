#!/usr/bin/env python3
"""Inference first under realistic training (policy slo), on the simulated GPU, in time slicing
and MPS. Prints Exclusive, Co-Exec and tandem's configurations in one run per sharing mode:
inference p50/p99 and their ratio to Exclusive, and training's throughput retained.

Workloads (--workload):
  realistic  training 20 x 1 ms kernels on the whole GPU, a 6 ms NCCL-named all-reduce kernel,
             4 ms of host work per step; online inference 4 x 1 ms kernels per request on half
             the GPU, Poisson arrivals at 100 requests/s (the default)
  harli      HARLI's case: training with a fixed batch (20 x 1 ms whole-GPU kernels, 2 ms of
             host work, no collective) beside decode-like inference, many small kernels that do
             not fill the GPU (16 x 250 us on a fifth of the SMs per request, 60 requests/s)
Latency is measured from arrival; the target is a multiple of Exclusive's p99 in whole
milliseconds (--target-ratio, by sharing mode: 1.2 time slicing, 1.1 MPS).

tandem's configurations (--configs, comma-separated; default: tandem):
  tandem  the default settings (under MPS: live SM partitions where green contexts exist)
  live    the same, named for the comparison
  split   a fixed split: training asks MPS for half the SMs (TANDEM_SLO_TRAINING_SMS=50)
  duty    the duty cycle only (TANDEM_SLO_PARTITION=off, no split)

--real: on the system's driver (a real GPU, scripts/gpu-check.sh): the sharing is the GPU's own
(MPS when its control daemon runs), --sharing only names the rows.

usage: scripts/bench_slo.py [BUILD_DIR] [--seconds S] [--sharing timeslice,mps] [--json] [--real]
                            [--workload realistic|harli] [--configs tandem,split,live,duty]
                            [--setting NAME=VALUE ...]   (TANDEM_* settings for every process)"""
import json
import math
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "e2e"))
from e2e_util import Env, finish  # noqa: E402

WORKLOADS = {
    "realistic": (["--compute-kernels", "20", "--kernel-us", "1000", "--comm-us", "6000", "--gap-us", "4000"],
                  ["--kernels", "4", "--kernel-us", "1000", "--blocks", "66", "--rate", "100"]),
    "harli": (["--compute-kernels", "20", "--kernel-us", "1000", "--comm-us", "0", "--gap-us", "2000"],
              ["--kernels", "16", "--kernel-us", "250", "--blocks", "26", "--rate", "60"]),
}
CONFIGS = {"tandem": {}, "live": {}, "split": {"TANDEM_SLO_TRAINING_SMS": "50"}, "duty": {"TANDEM_SLO_PARTITION": "off"}}
WARMUP_S = 1.5
TARGET_RATIO = {"timeslice": 1.2, "mps": 1.1}
GOALS = {"timeslice": (1.35, 0.3), "mps": (1.10, 0.7)}  # p99 at most x Exclusive, training at least


def target_ms(ratio, exclusive_p99):
    """The issue's target: ratio x Exclusive's p99, in whole milliseconds (rounded down, at least 1)."""
    return max(1, math.floor(ratio * exclusive_p99))


def run_tandem(env, sim, train, infer, seconds, slo_ms, settings):
    d = env.daemon("slo", **settings)
    a = env.start("train-sim", "--seconds", str(seconds), *train, role="training", **sim, **settings)
    time.sleep(0.2)
    b = env.start("infer-sim", *infer, "--slo-ms", str(slo_ms), role="inference", TANDEM_SLO_MS=str(slo_ms), **sim,
                  **settings)
    time.sleep(seconds / 2)
    st = env.status()  # mid-run: the policy at work
    t_infer = finish(b)
    t_train = finish(a)
    d.terminate()
    d.wait()
    gpus = (st or {}).get("gpus") or [{}]
    slo = gpus[0].get("slo") or {}
    return t_train, t_infer, {k: v for k, v in slo.items() if k != "history"}


def measure(env, sharing, seconds, settings, workload="realistic", configs=("tandem",), ratio=None):
    sim = {"SIMGPU_SHARING": sharing}
    train, infer_args = WORKLOADS[workload]
    infer = ["--seconds", str(seconds), "--warmup-seconds", str(WARMUP_S), *infer_args]
    ex_train = finish(env.start("train-sim", "--seconds", str(seconds), *train, **sim))
    ex_infer = finish(env.start("infer-sim", *infer, **sim))
    a = env.start("train-sim", "--seconds", str(seconds), *train, **sim)
    b = env.start("infer-sim", *infer, **sim)
    co_infer, co_train = finish(b), finish(a)
    slo_ms = target_ms(ratio or TARGET_RATIO[sharing], ex_infer["p99_ms"])
    runs = [("Exclusive", ex_train, ex_infer, None), ("Co-Exec", co_train, co_infer, None)]
    for name in configs:
        t_train, t_infer, slo = run_tandem(env, sim, train, infer, seconds, slo_ms, dict(settings, **CONFIGS[name]))
        runs.append((name, t_train, t_infer, slo))
    ex_rate = ex_train["iters_per_s"]
    rows, status = {}, {}
    for name, tr, inf, slo in runs:
        rows[name] = {"p50_ms": inf["p50_ms"], "p99_ms": inf["p99_ms"], "p99_x": inf["p99_ms"] / ex_infer["p99_ms"],
                      "training": tr["iters_per_s"] / ex_rate, "requests": inf["requests"]}
        if slo:
            status[name] = slo
    return {"sharing": sharing, "workload": workload, "slo_ms": slo_ms, "rows": rows, "status_slo": status}


def print_table(m):
    goal_p99, goal_train = GOALS[m["sharing"]]
    print(f"\n{m['sharing']}, {m['workload']}: target {m['slo_ms']} ms (goal: p99 <= {goal_p99:.2f}x Exclusive, "
          f"training >= {goal_train})")
    print(f"{'configuration':14} {'p50 ms':>8} {'p99 ms':>8} {'p99 x':>7} {'training':>9}")
    for name, r in m["rows"].items():
        met = ""
        if name not in ("Exclusive", "Co-Exec"):
            met = "  goal " + ("met" if r["p99_x"] <= goal_p99 and r["training"] >= goal_train else "NOT met")
        print(f"{name:14} {r['p50_ms']:8.2f} {r['p99_ms']:8.2f} {r['p99_x']:7.2f} {r['training']:9.3f}{met}")
    for name, slo in m["status_slo"].items():
        keys = ("live", "partition_pct", "spatial", "duty", "gating", "requests_unheld")
        print(f"tandemd ({name}):", json.dumps({k: slo.get(k) for k in keys}))


def main():
    args = sys.argv[1:]
    build = args[0] if args and not args[0].startswith("--") else "build"
    value = lambda flag, default: args[args.index(flag) + 1] if flag in args else default  # noqa: E731
    seconds = float(value("--seconds", 8.0))
    modes = value("--sharing", "timeslice,mps").split(",")
    workload = value("--workload", "realistic")
    configs = value("--configs", "tandem").split(",")
    if workload not in WORKLOADS or any(c not in CONFIGS for c in configs):
        sys.exit(f"unknown workload or configuration: {workload}, {configs}")
    settings = {}
    for i, a in enumerate(args):
        if a == "--setting":
            k, v = args[i + 1].split("=", 1)
            settings[k] = v
    if "--real" in args:  # the system's driver: the GPU as it is set up (MPS when its daemon runs)
        os.environ["TANDEM_E2E_REAL_DRIVER"] = "1"
    env = Env(build)
    results = [measure(env, mode, seconds, settings, workload, configs) for mode in modes]
    for m in results:
        if "--json" in args:
            print(json.dumps(m))
        else:
            print_table(m)


if __name__ == "__main__":
    main()
