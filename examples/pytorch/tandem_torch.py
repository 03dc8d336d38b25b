"""PyTorch side of tandem's client API (include/tandem/client.h): memory quotas (release the
caching allocator's unused blocks when tandem says the process is over its quota,
docs/memory.md) and online requests (tell tandem when a request arrives and when it is
answered).

    import tandem_torch
    tandem_torch.install()          # once, after `import torch`
    api = tandem_torch.requests()   # (begin, end), or None without tandem

Under LD_PRELOAD=libtandem.so this registers a memory-pressure callback; tandem calls it on its
progress thread when `tandemctl mem --set` lowered this process's quota under what it holds.
The callback empties PyTorch's cache (torch.cuda.empty_cache(), thread-safe: the allocator has
its own lock) and reports how much it gave back. Without tandem, install() returns False and
does nothing. Allocations that do not fit the quota fail with out-of-memory, which makes the
caching allocator free its cache and retry by itself: the callback only makes that happen
before the next allocation needs it.
"""
import ctypes

# tandem_memory_pressure_fn (include/tandem/client.h).
PRESSURE_FN = ctypes.CFUNCTYPE(None, ctypes.c_ulonglong, ctypes.c_ulonglong, ctypes.c_void_p)
_installed = None  # keeps the ctypes callback alive as long as tandem may call it


def memory_api():
    """libtandem's memory-pressure calls when it is loaded in this process (LD_PRELOAD), else
    None: a pair (register, report): register(PRESSURE_FN(callback), None) returns 0 when
    registered; report(bytes) says how much a callback gave back."""
    lib = ctypes.CDLL(None)
    try:
        register = lib.tandem_on_memory_pressure
        report = lib.tandem_report_release
    except AttributeError:
        return None
    register.argtypes = [PRESSURE_FN, ctypes.c_void_p]
    register.restype = ctypes.c_int
    report.argtypes = [ctypes.c_ulonglong]
    report.restype = None
    return register, report


def requests():
    """tandem's online-request calls when libtandem is loaded in this process, else None: a pair
    (begin, end). begin(arrival_ns), with the request's arrival on CLOCK_MONOTONIC
    (time.monotonic_ns(); 0 for now), returns its start, after waiting (bounded by TANDEM_SLO_MS)
    for a training bubble that can hold it under policy fill; end(start) when it is answered.
    With them tandem measures the latency from the arrival (queueing included) and admits a
    request before its first kernel, not at it."""
    lib = ctypes.CDLL(None)
    try:
        begin, end = lib.tandem_request_begin, lib.tandem_request_end
    except AttributeError:
        return None
    begin.argtypes = [ctypes.c_ulonglong]
    begin.restype = ctypes.c_ulonglong
    end.argtypes = [ctypes.c_ulonglong]
    end.restype = None
    return begin, end


def _torch_release():
    import torch
    before = torch.cuda.memory_reserved()
    torch.cuda.empty_cache()
    return max(0, before - torch.cuda.memory_reserved())


def install(release=None):
    """Registers `release` (default: empty PyTorch's CUDA cache) as this process's
    memory-pressure callback. `release()` returns the bytes it freed. True when tandem is
    loaded and the callback is registered."""
    global _installed
    found = memory_api()
    if not found:
        return False
    register, report = found
    release = release or _torch_release

    def on_pressure(quota_bytes, in_use_bytes, _user):
        try:
            freed = int(release())
        except Exception as e:  # never let an exception cross into tandem's thread
            print(f"tandem_torch: release failed: {e}")
            return
        if freed:
            report(freed)

    callback = PRESSURE_FN(on_pressure)
    if register(callback, None) != 0:
        return False
    _installed = callback
    return True
