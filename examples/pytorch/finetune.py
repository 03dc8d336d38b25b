#!/usr/bin/env python3
"""Parameter-efficient finetuning, LoRA-style: a frozen base (a stack of linear layers with
layer norm and GELU) whose every linear layer carries a trainable low-rank adapter
(y = W x + B A x, A of rank --rank, B started at zero); AdamW updates the adapters only. This
is the job HARLI co-locates with an LLM server. Runs on a real GPU and on tandem's simulated
one. Prints one JSON line at the end: steps, steps per second, trainable and frozen parameters.

    python3 examples/pytorch/finetune.py --seconds 10
    python3 examples/pytorch/finetune.py --seconds 30 --gpu-ms 20 --log-steps --pause-file /tmp/p

As a workload beside others (tandem's policies): --gpu-ms adds GPU time to each step as large
element-wise kernels (gpu_time.py), --sleep-ms a data-loading pause after it, --warmup-steps untimed steps first, --pause-file no steps
while the file exists, --log-steps a JSON line with the Unix time at each timed step's end.
"""
import argparse
import json
import sys
import time

from gpu_time import GpuTime, wait_while_paused


def build(torch, nn, dim, layers, rank):
    class LoraLinear(nn.Module):
        def __init__(self):
            super().__init__()
            self.base = nn.Linear(dim, dim)
            self.base.requires_grad_(False)  # the frozen pretrained weight
            self.a = nn.Parameter(torch.randn(rank, dim) / dim ** 0.5)
            self.b = nn.Parameter(torch.zeros(dim, rank))

        def forward(self, x):
            return self.base(x) + (x @ self.a.t()) @ self.b.t()

    blocks = []
    for _ in range(layers):
        blocks += [nn.LayerNorm(dim), LoraLinear(), nn.GELU()]
    model = nn.Sequential(*blocks, nn.Linear(dim, dim))
    model[-1].requires_grad_(False)
    return model


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=10.0, help="train for this long (default 10)")
    parser.add_argument("--dim", type=int, default=256, help="model width (default 256)")
    parser.add_argument("--layers", type=int, default=4, help="adapted linear layers (default 4)")
    parser.add_argument("--rank", type=int, default=8, help="adapter rank (default 8)")
    parser.add_argument("--batch", type=int, default=16, help="sequences per step (default 16)")
    parser.add_argument("--tokens", type=int, default=128, help="tokens per sequence (default 128)")
    parser.add_argument("--gpu-ms", type=float, default=0.0, help="GPU time added to each step (default 0)")
    parser.add_argument("--kernel-ms", type=float, default=1.0, help="length of one of those kernels (default 1)")
    parser.add_argument("--sleep-ms", type=float, default=0.0,
                        help="host pause after each step, the GPU idle (a data-loading bubble)")
    parser.add_argument("--warmup-steps", type=int, default=3, help="untimed steps first (default 3)")
    parser.add_argument("--pause-file", help="no steps while this file exists (a harness's switch)")
    parser.add_argument("--log-steps", action="store_true", help="a JSON line with the Unix time at each step's end")
    args = parser.parse_args()
    if args.seconds <= 0 or args.dim < 8 or args.layers < 1 or not 1 <= args.rank <= args.dim or args.gpu_ms < 0:
        parser.error("--seconds > 0, --dim >= 8, --layers >= 1, 1 <= --rank <= --dim, --gpu-ms >= 0")

    import torch
    from torch import nn
    if not torch.cuda.is_available():
        print("finetune.py: no CUDA device", file=sys.stderr)
        return 1
    torch.manual_seed(0)
    dev = torch.device("cuda")
    model = build(torch, nn, args.dim, args.layers, args.rank).to(dev)
    trainable = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(trainable, lr=1e-3)
    x = torch.randn(args.batch, args.tokens, args.dim, device=dev)
    target = torch.randn(args.batch, args.tokens, args.dim, device=dev)
    gpu = GpuTime(torch, args.gpu_ms, args.kernel_ms)

    def step():
        opt.zero_grad(set_to_none=True)
        gpu.launch()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = torch.nn.functional.mse_loss(model(x).float(), target)
        loss.backward()
        opt.step()
        torch.cuda.synchronize()  # a step's end: the loss is read, as a training loop logs it
        if args.sleep_ms:
            time.sleep(args.sleep_ms / 1e3)

    for _ in range(args.warmup_steps):
        step()
    print(json.dumps({"ready": round(time.time(), 4)}), flush=True)
    start, steps = time.monotonic(), 0
    try:
        while time.monotonic() - start < args.seconds:
            if wait_while_paused(args.pause_file):
                continue
            step()
            steps += 1
            if args.log_steps:
                print(json.dumps({"step": steps, "t": round(time.time(), 4)}), flush=True)
    except KeyboardInterrupt:
        pass
    elapsed = time.monotonic() - start
    print(json.dumps({"example": "finetune", "steps": steps, "seconds": round(elapsed, 3),
                      "steps_per_s": round(steps / elapsed, 2),
                      "trainable_params": sum(p.numel() for p in trainable),
                      "frozen_params": sum(p.numel() for p in model.parameters() if not p.requires_grad),
                      "gpu_ms_per_step": args.gpu_ms, **gpu.describe()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
