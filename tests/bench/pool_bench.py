#!/usr/bin/env python3
"""Memory-pool benchmark (docs/benchmarks.md), on whatever libcuda.so.1 the build runs against
(the simulated GPU here). Prints its figures; asserts nothing.

  allocation latency  p50 of cuMemAlloc from the pool vs passthrough to the driver, same run
  handover            a training process holds MIB of idle pooled memory; an online-inference
                      process then allocates MIB: tandemd lowers training's quota, training gives
                      its chunks back, inference maps and zero-fills them. p50/p99 over ROUNDS of
                      the inference's allocation (request to usable), tandemd's side of it, and
                      the driver calls the receiver made per handover.

usage: pool_bench.py BUILD_DIR KERNEL_IMAGE [MIB [ROUNDS]]
"""
import glob
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "e2e"))
from e2e_util import Env  # noqa: E402
import pool_e2e  # noqa: E402


def pctl(values, q):
    v = sorted(values)
    return v[min(len(v) - 1, int(q * len(v)))]


def main():
    build, image = sys.argv[1], sys.argv[2]
    mib = int(sys.argv[3]) if len(sys.argv) > 3 else 256
    rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 10
    env = Env(build)
    pool_e2e.CHUNK = "32M"
    lat = {}
    for pool in ("0", "1"):
        p = pool_e2e.probe(env, image, "allocs", 2000, TANDEM_MEM_POOL=pool)
        out, err = p.communicate(timeout=120)
        lat[pool] = json.loads(out.strip().splitlines()[-1])
    print(f"allocation p50, 64 KiB: pool {lat['1']['alloc_64k_ns']:.0f} ns, driver {lat['0']['alloc_64k_ns']:.0f} ns; "
          f"4 MiB: pool {lat['1']['alloc_4m_ns']:.0f} ns, driver {lat['0']['alloc_4m_ns']:.0f} ns")
    d = env.daemon(TANDEM_MEM_CHUNK="32M", TANDEM_MEM_WATERMARK="")
    took, daemon_ms, calls = [], [], []
    try:
        for _ in range(rounds):
            train = pool_e2e.probe(env, image, "cached", mib, role="training")
            assert train.stdout.readline().startswith("ready")
            infer = pool_e2e.probe(env, image, "take", mib, role="inference", TANDEM_MEM_WATERMARK="")
            out, err = infer.communicate(timeout=120)
            assert infer.returncode == 0, err
            took.append(float(out.split()[-1]))
            daemon_ms.append(env.status()["gpus"][0]["pool"]["handover_last_ms"])
            stats = json.load(open(os.path.join(env.tmp, f"stats-{infer.pid}.json")))["memory"]["pool"]
            calls.append(stats["driver_calls"])
            train.stdin.write("\n")
            train.stdin.flush()
            train.communicate(timeout=30)
    finally:
        d.terminate()
        d.wait(timeout=10)
    print(f"handover of {mib} MiB ({rounds} rounds): request to usable p50 {statistics.median(took):.1f} ms, "
          f"p99 {pctl(took, 0.99):.1f} ms; tandemd's part p50 {statistics.median(daemon_ms):.1f} ms, "
          f"p99 {pctl(daemon_ms, 0.99):.1f} ms; receiver's driver calls {statistics.median(calls):.0f} "
          f"({mib // 32} chunks: import, map+access, zero each)")
    for f in glob.glob(os.path.join(env.tmp, "stats-*.json")):
        os.unlink(f)


if __name__ == "__main__":
    main()
