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

cuda = ctypes.CDLL("libcuda.so.1")


def ck(result, what):
    if result != 0:
        sys.exit(f"{what} returned {result}")


ck(cuda.cuInit(0), "cuInit")
ctx, module, function = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p()
ck(cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0), "cuDevicePrimaryCtxRetain")
ck(cuda.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
ck(cuda.cuModuleLoad(ctypes.byref(module), image.encode()), "cuModuleLoad")
ck(cuda.cuModuleGetFunction(ctypes.byref(function), module, b"spin_kernel"), "cuModuleGetFunction")
ns = ctypes.c_ulonglong(1000)
args = (ctypes.c_void_p * 1)(ctypes.cast(ctypes.byref(ns), ctypes.c_void_p))
ck(cuda.cuLaunchKernel(function, 1, 1, 1, 1, 1, 1, 0, None, args, None), "cuLaunchKernel")
ck(cuda.cuCtxSynchronize(), "cuCtxSynchronize")

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
