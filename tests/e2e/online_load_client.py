#!/usr/bin/env python3
"""An online inference process under libtandem (ctypes only) whose requests need memory midway:
each request is reported to tandem (tandem_request_begin/end); inside it the process computes
for 20 ms (tandemd sees the request open meanwhile), then allocates MB MiB through the driver
(a model's load, a KV cache's growth) and writes it, and frees it after the request. Prints one
JSON line: each load's milliseconds (from the allocation's call to the memory written), and how
many failed.

usage: online_load_client.py KERNEL_IMAGE MB REQUESTS GAP_MS"""
import ctypes
import json
import sys
import time

image, mb, requests, gap_ms = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
cuda = ctypes.CDLL("libcuda.so.1")
tandem = ctypes.CDLL(None)  # libtandem.so, preloaded
tandem.tandem_request_begin.restype = ctypes.c_ulonglong
tandem.tandem_request_begin.argtypes = [ctypes.c_ulonglong]
tandem.tandem_request_end.argtypes = [ctypes.c_ulonglong]


def ck(result, what):
    if result != 0:
        sys.exit(f"{what} returned {result}")


ck(cuda.cuInit(0), "cuInit")
ctx, module, function = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p()
ck(cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0), "cuDevicePrimaryCtxRetain")
ck(cuda.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
ck(cuda.cuModuleLoad(ctypes.byref(module), image.encode()), "cuModuleLoad")
ck(cuda.cuModuleGetFunction(ctypes.byref(function), module, b"spin_kernel"), "cuModuleGetFunction")
ns = ctypes.c_ulonglong(1000000)  # 1 ms of request work
args = (ctypes.c_void_p * 1)(ctypes.cast(ctypes.byref(ns), ctypes.c_void_p))
first_ns = ctypes.c_ulonglong(20000000)  # the request's first part: 20 ms
first_args = (ctypes.c_void_p * 1)(ctypes.cast(ctypes.byref(first_ns), ctypes.c_void_p))
ck(cuda.cuLaunchKernel(function, 1, 1, 1, 1, 1, 1, 0, None, args, None), "cuLaunchKernel")
ck(cuda.cuCtxSynchronize(), "cuCtxSynchronize")
print("ready", flush=True)

loads_ms, failed = [], 0
for _ in range(requests):
    time.sleep(gap_ms / 1e3)
    begun = tandem.tandem_request_begin(0)
    ck(cuda.cuLaunchKernel(function, 1, 1, 1, 1, 1, 1, 0, None, first_args, None), "cuLaunchKernel")
    ck(cuda.cuCtxSynchronize(), "cuCtxSynchronize")
    t0 = time.monotonic()
    ptr = ctypes.c_uint64()
    r = cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(mb << 20))
    if r == 0:
        ck(cuda.cuMemsetD8_v2(ptr, ctypes.c_ubyte(1), ctypes.c_size_t(mb << 20)), "cuMemsetD8_v2")
        loads_ms.append(round((time.monotonic() - t0) * 1e3, 2))
        ck(cuda.cuLaunchKernel(function, 1, 1, 1, 1, 1, 1, 0, None, args, None), "cuLaunchKernel")
        ck(cuda.cuCtxSynchronize(), "cuCtxSynchronize")
    else:
        failed += 1
    tandem.tandem_request_end(begun)
    if r == 0:
        ck(cuda.cuMemFree_v2(ptr), "cuMemFree_v2")
print(json.dumps({"loads_ms": loads_ms, "failed": failed}), flush=True)
