#!/usr/bin/env python3
"""NVML's memory figures as pynvml reads them (ctypes: dlopen + dlsym), under libtandem.so on
the simulated GPU (docs/memory.md, "NVML").

  quota     TANDEM_MEM_LIMIT=256M: nvmlDeviceGetMemoryInfo (v1 and v2) reports the quota as
            total and the process's own 16 MiB as used
  none      no quota: the simulated GPU's total, its use including the process's 16 MiB
  disabled  TANDEM_DISABLE=1 with a quota: the simulated GPU's figures untouched

pynvml (nvidia-ml-py, pinned in requirements-nvml.txt) is installed with pip into
BUILD_DIR/pynvml on first use; when pip cannot reach the registry the test is skipped (exit
77) with the reason printed. The test owns its simulated GPU (its own SIMGPU_SHM namespace):
another simulated-GPU program on the machine does not change the figures NVML reports.

usage: nvml_pynvml_e2e.py BUILD_DIR
"""
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from e2e_util import Env  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
REQUIREMENTS = os.path.join(HERE, "requirements-nvml.txt")
SKIP = 77
DEVICE = 8 << 30
QUOTA = 256 << 20
MINE = 16 << 20

# The process under test: 16 MiB through the driver (dlopen'ed, as PyTorch's does), then NVML.
CHILD = r"""
import ctypes, json, os, pynvml
cuda = ctypes.CDLL("libcuda.so.1")
ctx, ptr = ctypes.c_void_p(), ctypes.c_uint64()
assert cuda.cuInit(0) == 0
assert cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0) == 0 and cuda.cuCtxSetCurrent(ctx) == 0
assert cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(%d)) == 0
pynvml.nvmlInit()
h = pynvml.nvmlDeviceGetHandleByIndex(0)
v1 = pynvml.nvmlDeviceGetMemoryInfo(h)
v2 = pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2)
procs = {p.pid: p.usedGpuMemory for p in pynvml.nvmlDeviceGetComputeRunningProcesses_v3(h)}
pynvml.nvmlShutdown()
print(json.dumps({"pid": os.getpid(), "v1": [v1.total, v1.free, v1.used],
                  "v2": [v2.total, v2.reserved, v2.free, v2.used], "procs": {str(k): v for k, v in procs.items()}}))
""" % MINE


def install_pynvml(build):
    target = os.path.join(build, "pynvml")
    stamp = os.path.join(target, ".requirements")
    wanted = open(REQUIREMENTS).read()
    if os.path.exists(stamp) and open(stamp).read() == wanted:
        return target
    if subprocess.run([sys.executable, "-m", "pip", "--version"], capture_output=True).returncode != 0:
        sys.exit("FAIL: no pip for this Python (scripts/setup.sh installs python3-pip)")
    # Into the build directory only: a system Python's "externally managed" guard does not apply.
    env = dict(os.environ, PIP_BREAK_SYSTEM_PACKAGES="1")
    r = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                        "--upgrade", "--target", target, "-r", REQUIREMENTS], capture_output=True, text=True,
                       timeout=300, env=env)
    if r.returncode != 0:
        unreachable = ("NewConnectionError", "Network is unreachable", "Temporary failure in name resolution",
                       "Max retries exceeded", "Could not find a version that satisfies", "ConnectTimeout")
        if any(u in r.stderr for u in unreachable):
            print(f"SKIP: pip cannot reach the package registry to install nvidia-ml-py:\n{r.stderr[-2000:]}")
            sys.exit(SKIP)
        sys.exit(f"FAIL: pip could not install nvidia-ml-py:\n{r.stderr[-2000:]}")
    with open(stamp, "w") as f:
        f.write(wanted)
    return target


def run_child(sim, pynvml_dir, **settings):
    """The child on this test's own simulated GPU (`sim`, an e2e_util.Env: its SIMGPU_SHM, and a
    socket where no tandemd listens)."""
    env = dict(sim.base, PYTHONPATH=pynvml_dir, LD_PRELOAD=os.path.join(sim.build, "lib", "libtandem.so"),
               SIMGPU_MEM_BYTES=str(DEVICE))
    for k in ("TANDEM_MEM_LIMIT", "TANDEM_DISABLE"):
        env.pop(k, None)
    env.update(settings)
    r = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        sys.exit(f"FAIL: the pynvml process failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
    out = json.loads(r.stdout.strip().splitlines()[-1])
    print(settings or "no settings", "->", out)
    return out


def check(cond, message):
    if not cond:
        sys.exit("FAIL: " + message)


def main():
    build = os.path.abspath(sys.argv[1])
    pynvml_dir = install_pynvml(build)
    sim = Env(build)
    try:
        run_cases(sim, pynvml_dir)
    finally:
        shutil.rmtree(sim.tmp, ignore_errors=True)


def run_cases(sim, pynvml_dir):
    q = run_child(sim, pynvml_dir, TANDEM_MEM_LIMIT="256M")
    check(q["v1"] == [QUOTA, QUOTA - MINE, MINE], f"with a quota, v1 is (quota, rest, own use): {q['v1']}")
    check(q["v2"] == [QUOTA, 0, QUOTA - MINE, MINE], f"with a quota, v2 is (quota, 0, rest, own use): {q['v2']}")
    check(q["procs"].get(str(q["pid"])) == MINE, "the GPU's processes list this one with its 16 MiB")

    for name, settings in (("none", {}), ("disabled", {"TANDEM_MEM_LIMIT": "256M", "TANDEM_DISABLE": "1"})):
        d = run_child(sim, pynvml_dir, **settings)
        total, free, used = d["v1"]
        # Only this process uses this test's simulated GPU: its 16 MiB are all of the use.
        check(total == DEVICE and used == MINE and free == total - used, f"{name}: the device's figures: {d['v1']}")
        check(d["v2"][0] == DEVICE and d["v2"][1] == 0, f"{name}: v2 is the device's: {d['v2']}")
    print("ok")


if __name__ == "__main__":
    main()
