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
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from driver_client import Spin, ck, cuda  # noqa: E402

image, mb, requests, gap_ms = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
tandem = ctypes.CDLL(None)  # libtandem.so, preloaded
tandem.tandem_request_begin.restype = ctypes.c_ulonglong
tandem.tandem_request_begin.argtypes = [ctypes.c_ulonglong]
tandem.tandem_request_end.argtypes = [ctypes.c_ulonglong]
spin = Spin(image)
spin.run(1000000)  # registered work
print("ready", flush=True)

loads_ms, failed = [], 0
for _ in range(requests):
    time.sleep(gap_ms / 1e3)
    begun = tandem.tandem_request_begin(0)
    spin.run(20000000)  # the request's first part: 20 ms
    t0 = time.monotonic()
    ptr = ctypes.c_uint64()
    r = cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(mb << 20))
    if r == 0:
        ck(cuda.cuMemsetD8_v2(ptr, ctypes.c_ubyte(1), ctypes.c_size_t(mb << 20)), "cuMemsetD8_v2")
        loads_ms.append(round((time.monotonic() - t0) * 1e3, 2))
        spin.run(1000000)  # the rest of the request: 1 ms
    else:
        failed += 1
    tandem.tandem_request_end(begun)
    if r == 0:
        ck(cuda.cuMemFree_v2(ptr), "cuMemFree_v2")
print(json.dumps({"loads_ms": loads_ms, "failed": failed}), flush=True)
