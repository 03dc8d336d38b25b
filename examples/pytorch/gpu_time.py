"""What train.py and serve.py share to make GPU time, not Python, the larger part of a step:
kernels of a chosen length, and a common start for programs measured side by side.

PyTorch's own kernels are tiny at these model sizes, so a step is mostly host time (Python and
the launch path), and on a busy machine its throughput would measure the CPU. `GpuTime` adds a
step's GPU time as element-wise kernels over a large tensor (an in-place add: one launch, no
host work, as long as the tensor is large), the way a real model's large layers keep the GPU
busy whatever the host does. The tensor's size for one kernel of `kernel_ms` is measured once
with CUDA events, so the same option means the same time on a real GPU and on the simulated
one (where a kernel lasts in proportion to its waves of blocks). Its blocks are many and its
time is in proportion to them, as tandem's cost estimate of a launch assumes; a spin kernel
(`torch.cuda._sleep`, one thread for milliseconds) would defeat that estimate.
"""
import os
import time


class GpuTime:
    """Launches about `ms` of GPU work per call, as kernels of about `kernel_ms` each."""

    PROBE_ELEMENTS = 1 << 25  # 128 MiB of float32: many waves on any GPU

    def __init__(self, torch, ms, kernel_ms):
        self.torch, self.ms, self.kernels, self.kernel_ms, self.buffer = torch, ms, 0, 0.0, None
        if ms <= 0:
            return
        probe = torch.empty(self.PROBE_ELEMENTS, device="cuda")
        per_element = self.time_ms(probe) / self.PROBE_ELEMENTS
        del probe
        torch.cuda.empty_cache()  # the probe's memory goes back to the GPU, not to PyTorch's cache
        self.buffer = torch.empty(max(1 << 16, int(min(kernel_ms, ms) / per_element)), device="cuda")
        self.kernel_ms = self.time_ms(self.buffer)
        self.kernels = max(1, round(ms / self.kernel_ms))

    def time_ms(self, tensor, tries=5):
        # The fastest of a few timed kernels: another process on the GPU can only lengthen one.
        torch = self.torch
        best = float("inf")
        for _ in range(tries):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            tensor.add_(1.0)
            end.record()
            end.synchronize()
            best = min(best, start.elapsed_time(end))
        return max(best, 1e-3)

    def launch(self):
        for _ in range(self.kernels):
            self.buffer.add_(1.0)

    def describe(self):
        return {"gpu_kernels": self.kernels, "gpu_kernel_ms": round(self.kernel_ms, 3)}


def wait_for_start(start_at):
    """Sleeps until the Unix time `start_at` (0: no wait). Returns how late this program was
    for it in seconds (its warm-up took longer), 0 when on time."""
    if not start_at:
        return 0.0
    now = time.time()
    if now > start_at:
        return round(now - start_at, 3)
    time.sleep(start_at - now)
    return 0.0


def wait_while_paused(pause_file):
    """Sleeps while the file `pause_file` exists (None: never). A harness switches a program's
    load off and on this way without restarting it (and warming it up again). Returns True
    when it paused."""
    if not pause_file or not os.path.exists(pause_file):
        return False
    while os.path.exists(pause_file):
        time.sleep(0.01)
    return True
