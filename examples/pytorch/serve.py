#!/usr/bin/env python3
"""A small PyTorch inference server loop: a transformer encoder (layer norm, attention, GELU)
answers requests of a few sequences each under torch.inference_mode, closed loop (the next
request as soon as the last is answered) or with Poisson arrivals (--rate). Every request ends
with a synchronization, so tandem sees it as one request. Runs on a real GPU and on tandem's
simulated one. Prints one JSON line: requests, latency p50/p99 (ms), seconds.

    python3 examples/pytorch/serve.py --requests 50
    python3 examples/pytorch/serve.py --seconds 5 --rate 100
"""
import argparse
import json
import random
import sys
import time


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=20, help="requests to answer (default 20)")
    parser.add_argument("--seconds", type=float, default=0.0, help="serve for this long instead of --requests")
    parser.add_argument("--rate", type=float, default=0.0, help="Poisson arrivals per second (default: closed loop)")
    parser.add_argument("--batch", type=int, default=4, help="sequences per request (default 4)")
    parser.add_argument("--tokens", type=int, default=32, help="tokens per sequence (default 32)")
    parser.add_argument("--dim", type=int, default=64, help="model width (default 64)")
    parser.add_argument("--seed", type=int, default=1, help="arrival seed (default 1)")
    args = parser.parse_args()
    if args.requests < 1 or args.batch < 1 or args.tokens < 1 or args.dim < 8 or args.dim % 4 or args.rate < 0:
        parser.error("--requests, --batch, --tokens >= 1, --dim a multiple of 4 and >= 8, --rate >= 0")

    import torch
    from torch import nn

    if not torch.cuda.is_available():
        print("serve.py: no CUDA device", file=sys.stderr)
        return 1
    dev = torch.device("cuda")
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(args.dim, nhead=4, dim_feedforward=4 * args.dim, activation="gelu",
                                       batch_first=True, norm_first=True)
    model = nn.Sequential(nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False),
                          nn.Linear(args.dim, 16)).to(dev).eval()
    rng = random.Random(args.seed)
    latencies = []
    start = time.monotonic()
    next_arrival = start
    with torch.inference_mode():
        while len(latencies) < args.requests if not args.seconds else time.monotonic() - start < args.seconds:
            if args.rate:
                next_arrival += rng.expovariate(args.rate)
                time.sleep(max(0.0, next_arrival - time.monotonic()))
            arrived = next_arrival if args.rate else time.monotonic()
            x = torch.randn(args.batch, args.tokens, args.dim, device=dev)
            scores = model(x).softmax(-1).argmax(-1)
            scores.cpu()  # the answer goes back to the client: a synchronization
            latencies.append(time.monotonic() - arrived)
    elapsed = time.monotonic() - start
    lat = sorted(latencies)
    pct = lambda q: round(1e3 * lat[min(len(lat) - 1, int(q * len(lat)))], 3)
    print(json.dumps({"example": "serve", "requests": len(lat), "seconds": round(elapsed, 3),
                      "requests_per_s": round(len(lat) / elapsed, 2), "p50_ms": pct(0.5), "p99_ms": pct(0.99)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
