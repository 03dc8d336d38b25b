#!/usr/bin/env python3
"""Memory-pool benchmark (docs/benchmarks.md), on whatever libcuda.so.1 the build runs against
(the simulated GPU here). Prints its figures; asserts nothing.

  allocation latency  p50 of cuMemAlloc and cuMemFree from the pool vs passthrough to the
                      driver, same run
  handover            a training process holds MIB of idle pooled memory; an online-inference
                      process then allocates MIB: tandemd lowers training's quota (and wakes it),
                      training gives its chunks back, inference maps and zero-fills them. p50/p99
                      over ROUNDS of the inference's allocation (request to usable; and without
                      the zero-fill, which the simulator does as CPU work), tandemd's side of it,
                      and the driver calls the receiver made per handover. Once with chunks of
                      32 MiB and once with chunks of 2 MiB (many chunks for the same bytes).

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


def latency(env, image):
    lat = {}
    for pool in ("0", "1"):
        p = pool_e2e.probe(env, image, "allocs", 2000, TANDEM_MEM_POOL=pool)
        out, err = p.communicate(timeout=120)
        lat[pool] = json.loads(out.strip().splitlines()[-1])
    for op in ("alloc", "free"):
        print(f"{op} p50, 64 KiB: pool {lat['1'][op + '_64k_ns']:.0f} ns, driver {lat['0'][op + '_64k_ns']:.0f} ns; "
              f"4 MiB: pool {lat['1'][op + '_4m_ns']:.0f} ns, driver {lat['0'][op + '_4m_ns']:.0f} ns")


def handover(env, image, mib, rounds, chunk_mib):
    pool_e2e.CHUNK = f"{chunk_mib}M"
    d = env.daemon(TANDEM_MEM_CHUNK=pool_e2e.CHUNK, TANDEM_MEM_WATERMARK="")
    took, unzeroed, daemon_ms, calls = [], [], [], []
    try:
        for _ in range(rounds):
            train = pool_e2e.probe(env, image, "cached", mib, role="training")
            assert train.stdout.readline().startswith("ready")
            infer = pool_e2e.probe(env, image, "take", mib, role="inference", TANDEM_MEM_WATERMARK="")
            out, err = infer.communicate(timeout=120)
            assert infer.returncode == 0, err
            took.append(pool_e2e.taken(out)[0])
            daemon_ms.append(env.status()["gpus"][0]["pool"]["handover_last_ms"])
            stats = json.load(open(os.path.join(env.tmp, f"stats-{infer.pid}.json")))["memory"]["pool"]
            calls.append(stats["driver_calls"])
            unzeroed.append(took[-1] - stats.get("zero_ns_total", 0) / 1e6)
            train.stdin.write("\n")
            train.stdin.flush()
            train.communicate(timeout=30)
    finally:
        d.terminate()
        d.wait(timeout=10)
    chunks = mib // chunk_mib
    print(f"handover of {mib} MiB in {chunks} chunks of {chunk_mib} MiB ({rounds} rounds): request to usable "
          f"p50 {statistics.median(took):.1f} ms, p99 {pctl(took, 0.99):.1f} ms; without the zero-fill "
          f"p50 {statistics.median(unzeroed):.1f} ms, p99 {pctl(unzeroed, 0.99):.1f} ms; tandemd's part "
          f"p50 {statistics.median(daemon_ms):.2f} ms, p99 {pctl(daemon_ms, 0.99):.2f} ms; receiver's driver calls "
          f"{statistics.median(calls):.0f} (import and map per chunk, access and memset per run, one wait)")


def main():
    build, image = sys.argv[1], sys.argv[2]
    mib = int(sys.argv[3]) if len(sys.argv) > 3 else 256
    rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 10
    env = Env(build)
    latency(env, image)
    for chunk_mib in (32, 2):
        handover(env, image, mib, rounds, chunk_mib)
    for f in glob.glob(os.path.join(env.tmp, "stats-*.json")):
        os.unlink(f)


if __name__ == "__main__":
    main()
