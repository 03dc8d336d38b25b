#!/usr/bin/env python3
"""CUDA_VISIBLE_DEVICES on the simulated driver (run with build/simgpu on LD_LIBRARY_PATH and
SIMGPU_DEVICES=3): indices and GPU-<uuid> prefixes select and reorder GPUs, a GPU keeps its
UUID and PCI bus whatever ordinal it is seen under, the list ends at the first entry naming no
GPU (unknown, repeated or ambiguous), and an empty list leaves no device (cuInit fails with
CUDA_ERROR_NO_DEVICE), as with NVIDIA's driver.

usage: visible_devices.py            (the checks; each configuration in a child process)
       visible_devices.py --list     (prints what this process sees, as JSON)"""
import ctypes
import json
import os
import subprocess
import sys


def list_devices():
    cuda = ctypes.CDLL("libcuda.so.1")
    r = cuda.cuInit(0)
    if r != 0:
        print(json.dumps({"init": r}))
        return
    count = ctypes.c_int()
    assert cuda.cuDeviceGetCount(ctypes.byref(count)) == 0
    devices = []
    for i in range(count.value):
        uuid = (ctypes.c_ubyte * 16)()
        bus = ctypes.create_string_buffer(32)
        assert cuda.cuDeviceGetUuid_v2(uuid, i) == 0
        assert cuda.cuDeviceGetPCIBusId(bus, 32, i) == 0
        back = ctypes.c_int(-1)
        assert cuda.cuDeviceGetByPCIBusId(ctypes.byref(back), bus.value) == 0
        devices.append({"uuid": bytes(uuid).hex(), "bus": bus.value.decode(), "ordinal_of_bus": back.value})
    print(json.dumps({"init": 0, "devices": devices}))


def seen(visible):
    env = dict(os.environ)
    if visible is None:
        env.pop("CUDA_VISIBLE_DEVICES", None)
    else:
        env["CUDA_VISIBLE_DEVICES"] = visible
    out = subprocess.run([sys.executable, __file__, "--list"], env=env, capture_output=True, text=True, timeout=30)
    if out.returncode != 0:
        raise SystemExit(f"FAIL: the child for CUDA_VISIBLE_DEVICES={visible!r} failed: {out.stderr}")
    return json.loads(out.stdout.splitlines()[-1])


def check(cond, message):
    print(("ok   " if cond else "FAIL ") + message)
    if not cond:
        raise SystemExit(1)


def text(uuid_hex):
    u = uuid_hex
    return f"GPU-{u[:8]}-{u[8:12]}-{u[12:16]}-{u[16:20]}-{u[20:]}"


def main():
    if sys.argv[1:] == ["--list"]:
        return list_devices()
    everything = seen(None)
    gpus = everything["devices"]
    check(len(gpus) == 3, f"without CUDA_VISIBLE_DEVICES all 3 GPUs are seen: {[g['bus'] for g in gpus]}")
    check(len({g["uuid"] for g in gpus}) == 3, "every GPU has its own UUID")
    check(all(g["ordinal_of_bus"] == i for i, g in enumerate(gpus)), "cuDeviceGetByPCIBusId finds each ordinal")
    uuids = [g["uuid"] for g in gpus]

    one = seen("2")["devices"]
    check([g["uuid"] for g in one] == [uuids[2]] and one[0]["bus"] == gpus[2]["bus"],
          "CUDA_VISIBLE_DEVICES=2: ordinal 0 is GPU 2, with GPU 2's UUID and PCI bus")
    check(one[0]["ordinal_of_bus"] == 0, "its PCI bus id maps back to ordinal 0")
    reordered = seen("2,0")["devices"]
    check([g["uuid"] for g in reordered] == [uuids[2], uuids[0]], "CUDA_VISIBLE_DEVICES=2,0 reorders")
    by_uuid = seen(f"{text(uuids[1])[:12]},0")["devices"]
    check([g["uuid"] for g in by_uuid] == [uuids[1], uuids[0]], "a GPU-<uuid> prefix selects that GPU")
    check([g["uuid"] for g in seen(text(uuids[1]).upper().replace("GPU-", "GPU-", 1))["devices"]] == [uuids[1]],
          "the full UUID, in capitals, selects it too")
    check([g["uuid"] for g in seen("1,7,0")["devices"]] == [uuids[1]], "the list ends at an index naming no GPU")
    check([g["uuid"] for g in seen("0,0,1")["devices"]] == [uuids[0]], "the list ends at a repeated GPU")
    check([g["uuid"] for g in seen("0,GPU-ffffffff")["devices"]] == [uuids[0]], "... and at an unknown UUID")
    for empty in ("", "-1", "MIG-0"):
        check(seen(empty) == {"init": 100}, f"CUDA_VISIBLE_DEVICES={empty!r}: cuInit fails with CUDA_ERROR_NO_DEVICE")
    print("visible devices: ok")


if __name__ == "__main__":
    main()
