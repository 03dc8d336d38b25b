"""The CUDA driver through ctypes, for test clients that run under libtandem.so without a
framework: a context on GPU 0 and the fixture image's spin kernel."""
import ctypes
import sys

cuda = ctypes.CDLL("libcuda.so.1")


def ck(result, what):
    if result != 0:
        sys.exit(f"{what} returned {result}")


class Spin:
    """spin_kernel from `image` on GPU 0's primary context (made current)."""

    def __init__(self, image):
        ck(cuda.cuInit(0), "cuInit")
        ctx, self.module, self.function = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p()
        ck(cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0), "cuDevicePrimaryCtxRetain")
        ck(cuda.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
        ck(cuda.cuModuleLoad(ctypes.byref(self.module), image.encode()), "cuModuleLoad")
        ck(cuda.cuModuleGetFunction(ctypes.byref(self.function), self.module, b"spin_kernel"), "cuModuleGetFunction")

    def run(self, ns):
        """One block spinning `ns` nanoseconds, waited for."""
        arg = ctypes.c_ulonglong(ns)
        args = (ctypes.c_void_p * 1)(ctypes.cast(ctypes.byref(arg), ctypes.c_void_p))
        ck(cuda.cuLaunchKernel(self.function, 1, 1, 1, 1, 1, 1, 0, None, args, None), "cuLaunchKernel")
        ck(cuda.cuCtxSynchronize(), "cuCtxSynchronize")
