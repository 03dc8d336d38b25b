#!/usr/bin/env python3
"""A Python process under libtandem that uses examples/pytorch/tandem_torch.py with a stand-in
for PyTorch's cache: 48 MiB allocated through the driver (ctypes), released when tandem calls.
Prints "ready" once registered work has been launched, "released" after the callback ran.

usage: pressure_client.py KERNEL_IMAGE REPO_ROOT"""
import ctypes
import os
import sys
import time

image, root = sys.argv[1], sys.argv[2]
sys.path.insert(0, os.path.join(root, "examples", "pytorch"))
import tandem_torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from driver_client import Spin, ck, cuda  # noqa: E402

Spin(image).run(1000)  # registered work

cache = ctypes.c_uint64()
CACHE = 48 << 20
ck(cuda.cuMemAlloc_v2(ctypes.byref(cache), ctypes.c_size_t(CACHE)), "cuMemAlloc_v2")
released = []


def release_cache():
    if not cache.value:
        return 0
    ck(cuda.cuMemFree_v2(ctypes.c_uint64(cache.value)), "cuMemFree_v2")
    cache.value = 0
    released.append(CACHE)
    return CACHE


assert tandem_torch.install(release=release_cache), "libtandem is not loaded"
print("ready", flush=True)
deadline = time.monotonic() + 10
while not released and time.monotonic() < deadline:
    time.sleep(0.01)
print("released" if released else "not released", flush=True)
sys.exit(0 if released else 1)
