#!/usr/bin/env python3
"""Prints what tandem saw in each demo process, beside what the examples measured."""
import glob
import json
import sys


def last_json(path):
    lines = [l for l in open(path).read().splitlines() if l.startswith("{")]
    return json.loads(lines[-1]) if lines else {}


def main(out):
    stats = sorted((json.load(open(p)) for p in glob.glob(f"{out}/stats-*.json")), key=lambda s: s["role"])
    if not stats:
        print("demo: no statistics were written (is libtandem.so built?)", file=sys.stderr)
        return 1
    train, infer = last_json(f"{out}/train.json"), last_json(f"{out}/infer.json")
    print(f"{'process':<24}{'role':<17}{'kernels':>9}{'nccl':>7}{'graphs':>8}{'allocs':>8}{'peak MiB':>10}  entry points")
    for s in stats:
        l, m = s["launches"], s["memory"]
        entries = ", ".join(f"{k}={v}" for k, v in sorted(l["by_entry"].items(), key=lambda kv: -kv[1]))
        name = "train-sim" if s["role"] == "training" else "infer-sim"
        print(f"{name + ' (pid ' + str(s['pid']) + ')':<24}{s['role']:<17}{l['total']:>9}{l['nccl']:>7}"
              f"{l['graph_launches']:>8}{m['allocs']:>8}{m['peak_bytes'] / 2**20:>10.1f}  {entries}")
    print()
    if train:
        print(f"train-sim: {train['iterations']} iterations, {train['iters_per_s']:.1f} it/s "
              f"(compute {train['compute_us']:.0f} us, communication {train['comm_us']:.0f} us, "
              f"gap {train['gap_us']:.0f} us per iteration)")
    if infer:
        print(f"infer-sim: {infer['requests']} requests, {infer['throughput_rps']:.1f} req/s, "
              f"p50 {infer['p50_ms']:.2f} ms, p95 {infer['p95_ms']:.2f} ms, p99 {infer['p99_ms']:.2f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
