#!/usr/bin/env python3
"""A pipeline-parallel PyTorch training job (torch.distributed.pipelining): a small MLP split
into WORLD_SIZE stages, one process and one GPU each (NCCL point-to-point between neighbours),
each step run by a schedule (GPipe or 1F1B) over --micro-batches micro-batches. Each stage's
forward and backward of a micro-batch add --fwd-ms and --bwd-ms of GPU time as large element-wise
kernels (gpu_time.py), so that a step is GPU-bound and its bubbles are where a pipeline has them:
a stage waits for its neighbour's activations or gradients, (p-1)/(m+p-1) of a step for p
stages and m micro-batches under GPipe. Runs on a real GPU and on tandem's simulated ones
(LD_LIBRARY_PATH=build/simgpu SIMGPU_DEVICES=2), with or without LD_PRELOAD=build/lib/libtandem.so.
Every rank prints one JSON line at the end: steps, steps_per_s.

    torchrun --nproc-per-node 2 examples/pytorch/pipeline.py --steps 20 --fwd-ms 5 --bwd-ms 10

As a workload beside others (tests/e2e/pipeline_fill_e2e.py): --warmup-steps untimed steps
first, then a {"ready"} line; --pause-file holds the stage before each step while the file
exists (remove every stage's file together: a held stage holds its neighbours in their
receives); --log-steps a JSON line with the Unix time at each timed step's end. A step ends
with a synchronization of its stage, as a training loop that reads its loss does.

The stages' shapes are given (PipelineStage's shape inference sends pickled metadata that
recv_object_list unpickles through numpy, which the project's venv lacks).
"""
import argparse
import json
import os
import signal
import sys
import time

from gpu_time import GpuTime, wait_while_paused


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=10, help="timed steps (default 10)")
    parser.add_argument("--schedule", choices=("gpipe", "1f1b"), default="gpipe", help="pipeline schedule (gpipe)")
    parser.add_argument("--micro-batches", type=int, default=4, help="micro-batches a step (default 4)")
    parser.add_argument("--batch", type=int, default=32, help="batch size (default 32)")
    parser.add_argument("--dim", type=int, default=64, help="model width (default 64)")
    parser.add_argument("--fwd-ms", type=float, default=0.0, help="GPU time of a micro-batch's forward, per stage")
    parser.add_argument("--bwd-ms", type=float, default=0.0, help="GPU time of a micro-batch's backward, per stage")
    parser.add_argument("--kernel-ms", type=float, default=1.0, help="length of one of those kernels (default 1)")
    parser.add_argument("--warmup-steps", type=int, default=2, help="untimed steps first (default 2)")
    parser.add_argument("--pause-file", help="no steps while this file exists (a harness's switch)")
    parser.add_argument("--log-steps", action="store_true", help="a JSON line with the Unix time at each timed step's end")
    args = parser.parse_args()
    if (args.steps < 1 or args.micro_batches < 1 or args.batch % args.micro_batches or args.fwd_ms < 0
            or args.bwd_ms < 0 or args.kernel_ms <= 0 or args.warmup_steps < 1):
        parser.error("--steps >= 1, --micro-batches >= 1 dividing --batch, --fwd-ms/--bwd-ms >= 0, --kernel-ms > 0, "
                     "--warmup-steps >= 1")

    import torch
    import torch.distributed as dist
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

    began = time.monotonic()
    rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    if world < 2:
        parser.error("run as WORLD_SIZE >= 2 ranks (torchrun, or RANK, WORLD_SIZE, MASTER_ADDR/PORT)")
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", rank)))
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=device)

    fwd = GpuTime(torch, args.fwd_ms, args.kernel_ms)
    bwd = GpuTime(torch, args.bwd_ms, args.kernel_ms)

    class GpuWork(torch.autograd.Function):
        """The stage's large layers: GPU time in the forward and in the backward."""

        @staticmethod
        def forward(ctx, x):
            if not x.is_meta:
                fwd.launch()
            return x.view_as(x)

        @staticmethod
        def backward(ctx, grad):
            bwd.launch()
            return grad

    class Stage(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.net = torch.nn.Sequential(torch.nn.Linear(args.dim, args.dim), torch.nn.ReLU(),
                                           torch.nn.Linear(args.dim, args.dim))

        def forward(self, x):
            return GpuWork.apply(self.net(x))

    torch.manual_seed(rank)
    module = Stage().to(device)
    shape = (args.batch // args.micro_batches, args.dim)
    # Which tensors carry gradients: a later stage's input (sent back), an earlier stage's output.
    inputs = torch.empty(shape, device=device, requires_grad=rank > 0)
    outputs = torch.empty(shape, device=device, requires_grad=rank + 1 < world)
    stage = PipelineStage(module, rank, world, device, input_args=(inputs,), output_args=outputs)
    cls = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B}[args.schedule]
    schedule = cls(stage, n_microbatches=args.micro_batches, loss_fn=lambda out, target: ((out - target) ** 2).mean())
    optimizer = torch.optim.SGD(module.parameters(), lr=1e-3)
    x = torch.randn(args.batch, args.dim, device=device)
    target = torch.randn(args.batch, args.dim, device=device)

    def step():
        optimizer.zero_grad()
        if rank == 0:
            schedule.step(x)
        elif rank == world - 1:
            schedule.step(target=target, losses=[])
        else:
            schedule.step()
        optimizer.step()
        torch.cuda.synchronize()

    for _ in range(args.warmup_steps):  # the first loads cuBLAS and connects NCCL
        step()
    warmup_s = time.monotonic() - began
    print(json.dumps({"ready": round(time.time(), 4), "warmup_s": round(warmup_s, 3)}), flush=True)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    start, steps = time.monotonic(), 0
    try:
        while steps < args.steps:
            if wait_while_paused(args.pause_file):
                continue
            step()
            steps += 1
            if args.log_steps:
                print(json.dumps({"step": steps, "t": round(time.time(), 4)}), flush=True)
    except KeyboardInterrupt:  # a harness's stop: the other stages may be in a step, no barrier
        print(json.dumps({"example": "pipeline", "rank": rank, "steps": steps, "interrupted": True}), flush=True)
        return 0
    train_s = time.monotonic() - start
    dist.barrier()
    dist.destroy_process_group()
    print(json.dumps({"example": "pipeline", "rank": rank, "world_size": world, "schedule": args.schedule,
                      "micro_batches": args.micro_batches, "steps": steps, "train_s": round(train_s, 3),
                      "steps_per_s": round(steps / train_s, 2), "warmup_s": round(warmup_s, 3),
                      "fwd": fwd.describe(), "bwd": bwd.describe()}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
