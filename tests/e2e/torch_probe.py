#!/usr/bin/env python3
"""PyTorch checks run inside one process by torch_e2e.py (on the simulated GPU, with or without
libtandem). Each mode prints JSON lines; the last is its result. Kernels are not executed on
the simulated GPU, so only shapes, memory and errors are checked, never values.

usage: torch_probe.py ops                 cuBLAS (fp32, bf16, cublasLt), cuDNN conv, attention,
                                          streams/events, copies, inference mode, mem_get_info
       torch_probe.py quota               mem_get_info and an allocation beyond the device size
       torch_probe.py pressure REPO_ROOT  holds a cache, waits for tandem_torch's release"""
import json
import os
import sys
import time


def emit(**kv):
    print(json.dumps(kv), flush=True)


def ops(torch):
    dev = torch.device("cuda")
    a = torch.randn(64, 32, device=dev)
    b = torch.randn(32, 16, device=dev)
    checks = {"device_name": torch.cuda.get_device_name(0),
              "capability": list(torch.cuda.get_device_capability(0)),
              "sm_count": torch.cuda.get_device_properties(0).multi_processor_count}
    checks["matmul"] = list((a @ b).shape)                                       # cuBLAS sgemm
    checks["matmul_bf16"] = list((a.bfloat16() @ b.bfloat16()).shape)            # cublasLt
    checks["addmm"] = list(torch.nn.functional.linear(a, b.t(), torch.zeros(16, device=dev)).shape)
    conv = torch.nn.Conv2d(3, 8, 3, padding=1).to(dev)
    img = torch.randn(2, 3, 16, 16, device=dev, requires_grad=True)
    out = conv(img)                                                               # cuDNN forward
    out.sum().backward()                                                          # cuDNN backward
    checks["conv"] = list(out.shape)
    checks["conv_grad"] = list(img.grad.shape)
    q = torch.randn(2, 4, 8, 16, device=dev, dtype=torch.bfloat16)
    checks["sdpa"] = list(torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True).shape)
    # Memory contents are real: copies and fills come back exactly.
    host = torch.arange(1000, dtype=torch.float32)
    checks["copy_roundtrip"] = bool(torch.equal(host.to(dev).cpu(), host))
    s = torch.cuda.Stream()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    with torch.cuda.stream(s):
        e0.record()
        c = a @ b
        e1.record()
    e1.synchronize()
    checks["event_ms"] = e0.elapsed_time(e1) >= 0
    with torch.inference_mode():
        checks["inference_mode"] = list(torch.nn.Linear(32, 4).to(dev)(a).shape)
    free, total = torch.cuda.mem_get_info()
    checks["mem_total"] = total
    checks["mem_free_le_total"] = 0 < free <= total
    checks["allocated"] = torch.cuda.memory_allocated()
    del c
    emit(mode="ops", **checks)


def quota(torch):
    free, total = torch.cuda.mem_get_info()
    emit(mode="quota", phase="info", free=free, total=total,
         device_total=torch.cuda.get_device_properties(0).total_memory)
    small = torch.empty(16 << 20, dtype=torch.uint8, device="cuda")  # fits
    try:
        torch.empty(total + (64 << 20), dtype=torch.uint8, device="cuda")
        oom = None
    except torch.OutOfMemoryError as e:
        oom = str(e).splitlines()[0]
    again = torch.empty(16 << 20, dtype=torch.uint8, device="cuda")  # still usable after the OOM
    emit(mode="quota", phase="result", free=free, total=total, oom=oom, small_ok=small.numel() + again.numel())


def pressure(torch, root):
    sys.path.insert(0, os.path.join(root, "examples", "pytorch"))
    import tandem_torch
    installed = tandem_torch.install()
    x = torch.empty(64 << 20, dtype=torch.uint8, device="cuda")
    x.fill_(1)
    torch.cuda.synchronize()
    del x  # the caching allocator keeps the 64 MiB block
    held = torch.cuda.memory_reserved()
    emit(mode="pressure", phase="ready", installed=installed, reserved=held)
    deadline = time.monotonic() + 15
    while torch.cuda.memory_reserved() and time.monotonic() < deadline:
        time.sleep(0.02)
    emit(mode="pressure", phase="result", installed=installed, held=held, reserved=torch.cuda.memory_reserved())


def main():
    import torch
    if not torch.cuda.is_available():
        sys.exit("torch.cuda.is_available() is False")
    mode = sys.argv[1]
    if mode == "ops":
        ops(torch)
    elif mode == "quota":
        quota(torch)
    elif mode == "pressure":
        pressure(torch, sys.argv[2])
    else:
        sys.exit(f"unknown mode {mode}")


if __name__ == "__main__":
    main()
