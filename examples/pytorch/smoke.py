#!/usr/bin/env python3
"""PyTorch smoke run for scripts/gpu-check.sh: a few training steps of a small CNN and a
torch.cuda.graph capture/replay, all under the PyTorch profiler. Prints one JSON line with the
number of GPU kernels the profiler saw, to compare with tandem's launches.total."""
import argparse
import json
import sys


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=5, help="training steps (default 5)")
    parser.add_argument("--replays", type=int, default=3, help="graph replays (default 3)")
    args = parser.parse_args()
    if args.steps < 1 or args.replays < 1:
        parser.error("--steps and --replays must be >= 1")

    import torch
    from torch import nn
    from torch.profiler import ProfilerActivity, profile

    if not torch.cuda.is_available():
        print("no CUDA device", file=sys.stderr)
        return 1
    dev = torch.device("cuda")
    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
        nn.Flatten(), nn.Linear(32, 10)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(32, 3, 32, 32, device=dev)
    y = torch.randint(0, 10, (32,), device=dev)
    loss_fn = nn.CrossEntropyLoss()

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(args.steps):
            opt.zero_grad(set_to_none=True)
            loss_fn(model(x), y).backward()
            opt.step()
        torch.cuda.synchronize()

        # Graph capture and replay of the forward pass (warm-up on a side stream, as documented).
        static_x = x.clone()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                model(static_x)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_y = model(static_x)
        for _ in range(args.replays):
            graph.replay()
        torch.cuda.synchronize()
        del static_y

    kernels = sum(1 for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA
                  and not e.name.startswith(("Memcpy", "Memset", "cudaMem")))
    print(json.dumps({"example": "pytorch-smoke", "profiler_kernels": kernels,
                      "steps": args.steps, "replays": args.replays}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
