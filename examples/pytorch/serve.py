#!/usr/bin/env python3
"""A small PyTorch inference server loop: a transformer encoder (layer norm, attention, GELU)
answers requests of a few sequences each under torch.inference_mode, closed loop (the next
request as soon as the last is answered) or with Poisson arrivals (--rate). Every request ends
with a synchronization, so tandem sees it as one request (or, with --tandem-requests, each is
delimited by tandem's client API: tandem_request_begin at its arrival, tandem_request_end at its
answer, through examples/pytorch/tandem_torch.py). Runs on a real GPU and on tandem's simulated
one. Prints one JSON line: requests, latency p50/p95/p99 (ms), seconds.

    python3 examples/pytorch/serve.py --requests 50
    python3 examples/pytorch/serve.py --seconds 5 --rate 100

As a workload beside others (tandem's policies): --gpu-ms adds GPU time to each request as
large element-wise kernels (gpu_time.py), --warmup untimed requests first (the first loads cuBLAS),
--start-at a common start of the timed part, --slo-ms the share of requests answered within a
latency target (SLO attainment).

    python3 examples/pytorch/serve.py --seconds 10 --rate 40 --gpu-ms 8 --warmup 5 --slo-ms 20
"""
import argparse
import json
import random
import sys
import time

from gpu_time import GpuTime, wait_for_start, wait_while_paused


def serve(args, rng, answer, latencies, api=None):
    """The timed requests; their latencies (s) go to `latencies`. `api`: tandem's (begin, end),
    told of each request's arrival and answer."""
    start = time.monotonic()
    next_arrival = start
    while len(latencies) < args.requests if not args.seconds else time.monotonic() - start < args.seconds:
        if wait_while_paused(args.pause_file):
            next_arrival = time.monotonic()  # arrivals resume now, none queued up meanwhile
            continue
        if args.rate:
            next_arrival += rng.expovariate(args.rate)
            time.sleep(max(0.0, next_arrival - time.monotonic()))
        arrived = next_arrival if args.rate else time.monotonic()
        if api:
            begun = api[0](int(arrived * 1e9))  # may wait for a bubble that holds the request (policy fill)
            answer()
            api[1](begun)
        else:
            answer()
        latencies.append(time.monotonic() - arrived)
        if args.log_requests:
            arrived_at = time.time() - (time.monotonic() - arrived)
            print(json.dumps({"request": len(latencies), "t": round(arrived_at, 4), "ms": round(1e3 * latencies[-1], 3)}),
                  flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=20, help="requests to answer (default 20)")
    parser.add_argument("--seconds", type=float, default=0.0, help="serve for this long instead of --requests")
    parser.add_argument("--rate", type=float, default=0.0, help="Poisson arrivals per second (default: closed loop)")
    parser.add_argument("--batch", type=int, default=4, help="sequences per request (default 4)")
    parser.add_argument("--tokens", type=int, default=32, help="tokens per sequence (default 32)")
    parser.add_argument("--dim", type=int, default=64, help="model width (default 64)")
    parser.add_argument("--seed", type=int, default=1, help="arrival seed (default 1)")
    parser.add_argument("--gpu-ms", type=float, default=0.0,
                        help="GPU time added to each request as large element-wise kernels before the model's (default 0)")
    parser.add_argument("--kernel-ms", type=float, default=1.0, help="length of one of those kernels (default 1)")
    parser.add_argument("--warmup", type=int, default=0, help="untimed requests before the timed ones (default 0)")
    parser.add_argument("--start-at", type=float, default=0.0,
                        help="Unix time at which the timed requests start, after the warm-up (default: at once)")
    parser.add_argument("--slo-ms", type=float, default=0.0, help="latency target: report the share of requests within it")
    parser.add_argument("--pause-file", help="no requests arrive while this file exists (a harness's switch)")
    parser.add_argument("--log-requests", action="store_true",
                        help="a JSON line per timed request: its arrival (Unix time) and latency")
    parser.add_argument("--tandem-requests", action="store_true",
                        help="delimit each timed request with tandem's client API (tandem_request_begin/end) rather "
                             "than by its synchronization; without libtandem.so loaded, a warning and no effect")
    args = parser.parse_args()
    if (args.requests < 1 or args.batch < 1 or args.tokens < 1 or args.dim < 8 or args.dim % 4 or args.rate < 0
            or args.gpu_ms < 0 or args.kernel_ms <= 0 or args.warmup < 0 or args.slo_ms < 0):
        parser.error("--requests, --batch, --tokens >= 1, --dim a multiple of 4 and >= 8, --rate, --gpu-ms, --warmup, "
                     "--slo-ms >= 0, --kernel-ms > 0")
    began = time.monotonic()

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
    gpu = GpuTime(torch, args.gpu_ms, args.kernel_ms)
    api = None
    if args.tandem_requests:
        import tandem_torch
        api = tandem_torch.requests()
        if not api:
            print("serve.py: --tandem-requests: libtandem.so is not loaded; requests are not reported", file=sys.stderr)

    def answer():
        x = torch.randn(args.batch, args.tokens, args.dim, device=dev)
        gpu.launch()
        scores = model(x).softmax(-1).argmax(-1)
        scores.cpu()  # the answer goes back to the client: a synchronization

    with torch.inference_mode():
        for _ in range(args.warmup):
            answer()
        warmup_s = time.monotonic() - began
        late_s = wait_for_start(args.start_at)
        rng = random.Random(args.seed)
        latencies = []
        print(json.dumps({"ready": round(time.time(), 4), "warmup_s": round(warmup_s, 3)}), flush=True)
        start = time.monotonic()
        try:  # Ctrl-C (SIGINT) ends serving, with the summary
            serve(args, rng, answer, latencies, api)
        except KeyboardInterrupt:
            pass
    elapsed = time.monotonic() - start
    lat = sorted(latencies)
    pct = lambda q: round(1e3 * lat[min(len(lat) - 1, int(q * len(lat)))], 3) if lat else None
    out = {"example": "serve", "requests": len(lat), "seconds": round(elapsed, 3),
           "requests_per_s": round(len(lat) / elapsed, 2), "p50_ms": pct(0.5), "p95_ms": pct(0.95),
           "p99_ms": pct(0.99), "warmup_s": round(warmup_s, 3), "late_s": late_s,
           "gpu_ms_per_request": args.gpu_ms, "tandem_requests": bool(api), **gpu.describe()}
    if args.slo_ms and lat:
        out["slo_attainment"] = round(sum(l * 1e3 <= args.slo_ms for l in lat) / len(lat), 4)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
