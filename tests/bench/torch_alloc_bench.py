#!/usr/bin/env python3
"""PyTorch's allocators under tandem's pool, side by side in one run (simulated GPU unless
TANDEM_E2E_REAL_DRIVER=1): torch.empty of 1 KiB to 64 MiB (allocate and free, p50 of 2000 per
size) and a training step (examples/pytorch/train.py, steps/s), with PyTorch's caching allocator
(TANDEM_MEM_TORCH_BACKEND=keep) and with its stream-ordered backend on the pool
(TANDEM_MEM_TORCH_BACKEND=async with TANDEM_MEM_POOL=1). Prints the figures and their ratios; asserts nothing.

    python3 tests/bench/torch_alloc_bench.py build [--rounds 2]
"""
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PYTHON = os.environ.get("TANDEM_TEST_PYTHON") or os.path.join(ROOT, ".venv", "bin", "python")

EMPTY = r"""
import json, time, torch
torch.empty(1, device="cuda")
out = {}
for kib in (1, 64, 1024, 16384, 65536):
    n = kib * 1024
    for _ in range(100):
        torch.empty(n, dtype=torch.uint8, device="cuda")
    times = []
    for _ in range(2000):
        t = time.perf_counter_ns()
        x = torch.empty(n, dtype=torch.uint8, device="cuda")
        del x
        times.append(time.perf_counter_ns() - t)
    times.sort()
    out[str(kib)] = times[len(times) // 2] / 1000
print(json.dumps({"backend": torch.cuda.get_allocator_backend(), "p50_us": out}))
"""


def run(build, args, backend):
    env = dict(os.environ, TANDEM_MEM_POOL="1", TANDEM_MEM_TORCH_BACKEND=backend,
               LD_PRELOAD=os.path.join(build, "lib", "libtandem.so"), SIMGPU_SHM=f"/simgpu-bench-{os.getpid()}")
    if os.environ.get("TANDEM_E2E_REAL_DRIVER") != "1":
        env["LD_LIBRARY_PATH"] = os.path.join(build, "simgpu")
    p = subprocess.run([PYTHON, *args], env=env, capture_output=True, text=True, timeout=600)
    if p.returncode:
        raise SystemExit(p.stderr[-2000:])
    return json.loads([l for l in p.stdout.splitlines() if l.startswith("{")][-1])


def main():
    build = sys.argv[1]
    rounds = int(sys.argv[sys.argv.index("--rounds") + 1]) if "--rounds" in sys.argv else 2
    train = [os.path.join(ROOT, "examples", "pytorch", "train.py"), "--seconds", "8", "--replays", "0",
             "--batch", "512", "--dim", "128", "--warmup-steps", "2"]
    for r in range(rounds):
        e = {b: run(build, ["-c", EMPTY], b)["p50_us"] for b in ("keep", "async")}
        t = {b: run(build, train, b)["steps_per_s"] for b in ("keep", "async")}
        sizes = " ".join(f"{k} KiB {e['keep'][k]:.1f}/{e['async'][k]:.1f} us ({e['async'][k] / e['keep'][k]:.2f} x)"
                         for k in e["keep"])
        print(f"round {r + 1}: torch.empty p50, caching/stream-ordered on the pool: {sizes}; training "
              f"{t['keep']:.1f}/{t['async']:.1f} steps/s ({t['async'] / t['keep']:.3f} x)", flush=True)


if __name__ == "__main__":
    main()
