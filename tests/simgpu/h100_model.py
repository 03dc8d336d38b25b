#!/usr/bin/env python3
"""The simulated GPU answers device attributes, function attributes and occupancy queries as an
H100 SXM5 80 GB would (what cuBLAS and cuDNN size their kernels from), and refuses what it does
not know with the driver's error code. Run with build/simgpu on LD_LIBRARY_PATH.

usage: h100_model.py KERNEL_FATBIN"""
import ctypes
import sys

INVALID_VALUE, NOT_FOUND = 1, 500
cuda = ctypes.CDLL("libcuda.so.1")


def check(cond, message):
    print(("ok   " if cond else "FAIL ") + message)
    if not cond:
        raise SystemExit(1)


def attr(n):
    v = ctypes.c_int(-7)
    r = cuda.cuDeviceGetAttribute(ctypes.byref(v), n, 0)
    return r, v.value


def main():
    check(cuda.cuInit(0) == 0, "cuInit")
    expected = {16: 132, 75: 9, 76: 0, 8: 48 << 10, 97: 227 << 10, 81: 228 << 10, 82: 65536, 106: 32,
                39: 2048, 38: 50 << 20, 10: 32, 120: 1, 102: 1, 103: 1}
    got = {n: attr(n) for n in expected}
    check(all(got[n] == (0, v) for n, v in expected.items()),
          f"device attributes of an H100 (SMs, cc 9.0, shared memory 48K/227K opt-in/228K per SM, ...): {got}")
    check(attr(9999)[0] == INVALID_VALUE, "an unknown device attribute fails with CUDA_ERROR_INVALID_VALUE")

    ctx, module, fn = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p()
    check(cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0) == 0 and cuda.cuCtxSetCurrent(ctx) == 0, "context")
    check(cuda.cuModuleLoad(ctypes.byref(module), sys.argv[1].encode()) == 0, "module load")
    check(cuda.cuModuleGetFunction(ctypes.byref(fn), module, b"no_such_kernel") == NOT_FOUND,
          "an unknown kernel name fails with CUDA_ERROR_NOT_FOUND")
    check(cuda.cuModuleGetFunction(ctypes.byref(fn), module, b"spin_kernel") == 0, "spin_kernel found")

    def fattr(n):
        v = ctypes.c_int(-7)
        return cuda.cuFuncGetAttribute(ctypes.byref(v), n, fn), v.value
    check(fattr(8) == (0, 48 << 10) and fattr(4) == (0, 32) and fattr(0) == (0, 1024),
          "a kernel starts with 48 KiB of dynamic shared memory, 32 registers, 1024 threads")
    check(cuda.cuFuncSetAttribute(fn, 8, 200 << 10) == 0 and fattr(8) == (0, 200 << 10),
          "its dynamic shared memory limit can be raised (200 KiB) and reads back")
    check(cuda.cuFuncSetAttribute(fn, 8, (227 << 10) + 1) == INVALID_VALUE, "... but not past the 227 KiB opt-in")
    check(cuda.cuFuncSetAttribute(fn, 4, 64) == INVALID_VALUE, "read-only attributes cannot be set")
    check(fattr(99)[0] == INVALID_VALUE, "an unknown function attribute fails with CUDA_ERROR_INVALID_VALUE")

    n = ctypes.c_int()
    cuda.cuOccupancyMaxActiveBlocksPerMultiprocessor.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int,
                                                                 ctypes.c_size_t]
    occ = {}
    for block, smem in ((256, 0), (1024, 0), (128, 100 << 10), (128, 0)):
        check(cuda.cuOccupancyMaxActiveBlocksPerMultiprocessor(ctypes.byref(n), fn, block, smem) == 0, "occupancy")
        occ[(block, smem)] = n.value
    check(occ == {(256, 0): 8, (1024, 0): 2, (128, 100 << 10): 2, (128, 0): 16},
          f"blocks per SM follow threads, registers and shared memory: {occ}")
    avail = ctypes.c_size_t()
    check(cuda.cuOccupancyAvailableDynamicSMemPerBlock(ctypes.byref(avail), fn, 2, 128) == 0 and
          avail.value == (114 << 10) - 1024, f"two blocks per SM may each have 113 KiB of shared memory ({avail.value})")
    print("h100 model: ok")


if __name__ == "__main__":
    main()
