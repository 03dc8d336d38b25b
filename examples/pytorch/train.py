#!/usr/bin/env python3
"""A small PyTorch training job: a convolutional stem, a transformer block (layer norm,
scaled_dot_product_attention, GELU) and a classifier, trained with AdamW under bf16 autocast;
then the forward pass captured as a CUDA graph (torch.cuda.graph) and replayed. It runs on a
real GPU and on tandem's simulated one (LD_LIBRARY_PATH=build/simgpu), with or without
LD_PRELOAD=build/lib/libtandem.so. Prints one JSON line: steps, replays, seconds, memory.

    python3 examples/pytorch/train.py --steps 20 --replays 10

As a workload beside others (tandem's policies): --gpu-ms adds GPU time to each step as large
element-wise kernels (gpu_time.py), --sleep-ms a data-loading pause after it, --warmup-steps
untimed steps first (the first loads cuBLAS and cuDNN) and --start-at a common start of the
timed part. --micro-batches K runs each step as K micro-batches with gradient accumulation
(tandem_microbatch.MicrobatchRunner, installed beside this file): under tandem, a step asked for
memory discards the micro-batch that is running and gives its memory back at once (SIRIUS's
instant adjustment), and one that runs out of memory goes on with more, smaller micro-batches.
Data-parallel when started as a rank of a group (torchrun, or RANK, WORLD_SIZE, LOCAL_RANK,
MASTER_ADDR and MASTER_PORT set): NCCL process group, one GPU per rank (LOCAL_RANK), the model
wrapped in DistributedDataParallel, whose gradient all-reduces are NCCL kernels.

    python3 examples/pytorch/train.py --seconds 10 --gpu-ms 30 --sleep-ms 15 --warmup-steps 3
    torchrun --nproc-per-node 2 examples/pytorch/train.py --steps 20 --replays 0
"""
import argparse
import json
import os
import signal
import sys
import time

from gpu_time import GpuTime, wait_for_start, wait_while_paused


def build_model(torch, nn, dim):
    class Block(nn.Module):
        """Pre-norm transformer block: attention through scaled_dot_product_attention, GELU MLP."""

        def __init__(self):
            super().__init__()
            self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
            self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
            self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

        def forward(self, x):
            b, t, c = x.shape
            q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, 4, c // 4).permute(2, 0, 3, 1, 4)
            a = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(a.transpose(1, 2).reshape(b, t, c))
            return x + self.mlp(self.norm2(x))

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, dim, 3, stride=2, padding=1), nn.BatchNorm2d(dim), nn.GELU(),
                                      nn.Conv2d(dim, dim, 3, stride=2, padding=1))
            self.block = Block()
            self.head = nn.Linear(dim, 10)

        def forward(self, img):
            x = self.stem(img).flatten(2).transpose(1, 2)  # (batch, tokens, dim)
            return self.head(self.block(x).mean(1))

    return Net()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=10, help="training steps (default 10)")
    parser.add_argument("--replays", type=int, default=5, help="CUDA graph replays of the forward pass (default 5)")
    parser.add_argument("--batch", type=int, default=8, help="batch size (default 8)")
    parser.add_argument("--dim", type=int, default=64, help="model width (default 64)")
    parser.add_argument("--seconds", type=float, default=0.0,
                        help="train for this long instead of --steps (the graph part follows)")
    parser.add_argument("--sleep-ms", type=float, default=0.0,
                        help="host pause after each step, the GPU idle (a data-loading bubble)")
    parser.add_argument("--gpu-ms", type=float, default=0.0,
                        help="GPU time added to each step as large element-wise kernels before the model's (default 0)")
    parser.add_argument("--kernel-ms", type=float, default=1.0, help="length of one of those kernels (default 1)")
    parser.add_argument("--warmup-steps", type=int, default=0, help="untimed steps before the timed ones (default 0)")
    parser.add_argument("--warmup-batch", type=int, default=0,
                        help="batch size of the warm-up steps (default: --batch): a job whose first steps (a "
                             "validation pass, an autotuner's trials) took more memory than its steps now use")
    parser.add_argument("--start-at", type=float, default=0.0,
                        help="Unix time at which the timed steps start, after the warm-up (default: at once)")
    parser.add_argument("--pause-file", help="no steps while this file exists (a harness's switch)")
    parser.add_argument("--log-steps", action="store_true", help="a JSON line with the Unix time at each timed step's end")
    parser.add_argument("--micro-batches", type=int, default=0,
                        help="run each step as this many micro-batches through tandem_microbatch.MicrobatchRunner "
                             "(gives live memory back under tandem; one process only; default: one plain step)")
    args = parser.parse_args()
    if (args.steps < 1 or args.replays < 0 or args.batch < 1 or args.dim < 8 or args.dim % 4 or args.gpu_ms < 0
            or args.kernel_ms <= 0 or args.warmup_steps < 0 or args.warmup_batch < 0 or args.micro_batches < 0):
        parser.error("--steps >= 1, --replays >= 0, --batch >= 1, --dim a multiple of 4 and >= 8, --gpu-ms >= 0, "
                     "--kernel-ms > 0, --warmup-steps >= 0, --warmup-batch >= 0, --micro-batches >= 0")

    began = time.monotonic()
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    if world > 1 and args.seconds:
        parser.error("--seconds: the ranks of a group would disagree on the number of steps; use --steps")
    if world > 1 and args.micro_batches:
        parser.error("--micro-batches: one process only here (MicrobatchRunner takes the plain module, not DDP's)")

    import torch
    from torch import nn

    if not torch.cuda.is_available():
        print("train.py: no CUDA device", file=sys.stderr)
        return 1
    if world > 1:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        torch.distributed.init_process_group("nccl")
    dev = torch.device("cuda", torch.cuda.current_device())
    torch.manual_seed(0)
    model = build_model(torch, nn, args.dim).to(dev)
    # Every rank builds the same model from the same seed: DDP's start-up check and broadcast of
    # it (init_sync) are not needed, and the check reads an all-gather's result back, which the
    # simulated GPU's collectives leave unfilled (they time, but move no data: docs/simgpu.md).
    net = torch.nn.parallel.DistributedDataParallel(model, init_sync=False) if world > 1 else model
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    img = torch.randn(args.batch, 3, 32, 32, device=dev)
    label = torch.randint(0, 10, (args.batch,), device=dev)
    gpu = GpuTime(torch, args.gpu_ms, args.kernel_ms)
    runner = None
    if args.micro_batches:
        from tandem_microbatch import MicrobatchRunner
        runner = MicrobatchRunner(model, opt, loss_fn, micro_batches=args.micro_batches)

    def step(img=img, label=label):
        gpu.launch()
        if runner:
            with torch.autocast("cuda", dtype=torch.bfloat16):
                runner.step(img, label)
        else:
            opt.zero_grad(set_to_none=True)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = loss_fn(net(img), label)
            loss.backward()
            opt.step()
        if args.sleep_ms:
            torch.cuda.synchronize()
            time.sleep(args.sleep_ms / 1e3)

    for _ in range(args.warmup_steps):
        if args.warmup_batch:
            step(torch.randn(args.warmup_batch, 3, 32, 32, device=dev),
                 torch.randint(0, 10, (args.warmup_batch,), device=dev))
        else:
            step()
    torch.cuda.synchronize()
    warmup_s = time.monotonic() - began
    late_s = wait_for_start(args.start_at)

    print(json.dumps({"ready": round(time.time(), 4), "warmup_s": round(warmup_s, 3)}), flush=True)
    start = time.monotonic()
    steps = 0
    # Ctrl-C (SIGINT) ends the timed part early, with the summary; also when started in the
    # background by a shell or harness, which leaves SIGINT ignored (Python then never raises it).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        while steps < args.steps if not args.seconds else time.monotonic() - start < args.seconds:
            if wait_while_paused(args.pause_file):
                continue
            step()
            steps += 1
            if args.log_steps:
                print(json.dumps({"step": steps, "t": round(time.time(), 4)}), flush=True)
    except KeyboardInterrupt:
        pass
    torch.cuda.synchronize()
    train_s = time.monotonic() - start
    if world > 1:
        torch.distributed.barrier()

    # Forward pass as a CUDA graph: warm up on a side stream, capture, replay (as documented).
    model.eval()
    static_img = img.clone()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side), torch.no_grad():
        for _ in range(2):
            model(static_img)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.no_grad(), torch.cuda.graph(graph):
        static_out = model(static_img)
    for _ in range(args.replays):
        static_img.copy_(img)
        graph.replay()
    torch.cuda.synchronize()
    free, total = torch.cuda.mem_get_info()
    if world > 1:
        torch.distributed.destroy_process_group()
    print(json.dumps({"example": "train", "rank": rank, "world_size": world, "steps": steps, "replays": args.replays,
                      "train_s": round(train_s, 3), "steps_per_s": round(steps / train_s, 2),
                      "samples_per_s": round(steps * args.batch / train_s, 2),
                      **({"micro_batches": dict(runner.stats), "k": runner.k} if runner else {}),
                      "warmup_s": round(warmup_s, 3), "late_s": late_s,
                      "gpu_ms_per_step": args.gpu_ms, **gpu.describe(),
                      "out_shape": list(static_out.shape), "max_allocated": torch.cuda.max_memory_allocated(),
                      "reserved": torch.cuda.memory_reserved(), "mem_free": free, "mem_total": total}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
