#!/usr/bin/env python3
"""The simulated GPU's nvidia-smi (build/simgpu/nvidia-smi, docs/simgpu.md) outside and inside
tandem: outside, the device's memory; run as the child of a process under libtandem.so with a
quota (as SGLang runs it), the quota, through NVML's hooked memory query; -L; bad arguments
refused with exit status 2. Owns its simulated GPU (its own SIMGPU_SHM namespace).

usage: nvidia_smi_e2e.py BUILD_DIR
"""
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from e2e_util import Env, check, preload  # noqa: E402

GiB = 1 << 30


def main():
    env = Env(sys.argv[1])
    smi = os.path.join(env.build, "simgpu", "nvidia-smi")
    env.base.update(SIMGPU_MEM_BYTES=str(8 * GiB), SIMGPU_DEVICES="2")

    def run(*args, tandem=None):
        e = dict(env.base)
        if tandem:
            e.update(LD_PRELOAD=preload(env.build), **tandem)
        # A shell parent, so that nvidia-smi is a child that inherits the preload and settings.
        return subprocess.run(["sh", "-c", '"$0" "$@"', smi, *args], env=e, capture_output=True, text=True, timeout=30)

    out = run("--query-gpu=index,memory.total,memory.used,memory.free", "--format=csv")
    print(out.stdout)
    lines = out.stdout.strip().splitlines()
    check(out.returncode == 0 and lines[0] == "index, memory.total [MiB], memory.used [MiB], memory.free [MiB]",
          "a header with units")
    check(lines[1:] == ["0, 8192 MiB, 0 MiB, 8192 MiB", "1, 8192 MiB, 0 MiB, 8192 MiB"], "both GPUs, the device's memory")
    listed = run("-L").stdout.strip().splitlines()
    check(len(listed) == 2 and listed[1].startswith("GPU 1: ") and "(UUID: GPU-" in listed[1], f"-L lists the GPUs ({listed})")
    quota = run("--query-gpu=memory.total", "--format=csv,noheader,nounits", "-i", "0",
                tandem={"TANDEM_MEM_LIMIT": "3G", "TANDEM_ROLE": "inference"})
    check(quota.stdout.strip() == "3072", f"under tandem with a 3 GiB quota, memory.total is the quota ({quota.stdout.strip()}{quota.stderr.strip()})")
    disabled = run("--query-gpu=memory.total", "--format=csv,noheader,nounits", "-i", "0",
                   tandem={"TANDEM_MEM_LIMIT": "3G", "TANDEM_DISABLE": "1"})
    check(disabled.stdout.strip() == "8192", "with TANDEM_DISABLE=1, the device's")
    for bad in (["--query-gpu=power.draw"], ["--query-gpu=memory.total", "--format=xml"], ["-i", "7", "-L"],
                ["-i", "x", "-L"], ["-L", "-i"], ["--bogus"], []):
        r = run(*bad)
        check(r.returncode == 2 and r.stderr.strip(), f"{bad} refused with exit 2: {r.stderr.strip().splitlines()[0] if r.stderr.strip() else ''}")


if __name__ == "__main__":
    main()
