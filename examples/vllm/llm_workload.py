#!/usr/bin/env python3
"""vLLM as a workload beside others on one GPU (docs/llm-serving.md), on a model directory of
tiny_model.py (dummy weights, token-id prompts: nothing downloaded) or any local model.

  serve  online inference: requests arrive as a Poisson process (--rate a second), each a prompt
         of --prompt tokens answered with --max-tokens tokens; the engine is stepped here
         (LLMEngine.add_request / step, as vLLM's server does). One JSON line per answered
         request: arrival time, time to first token (TTFT) and time per output token (TPOT).
  batch  offline filler: generate of a fixed batch (--batch prompts, --max-tokens each,
         ignore_eos) again and again; one JSON line per round with its tokens per second.

--gpu-ms (serve) adds GPU time to each engine step as large element-wise kernels on vLLM's
stream (examples/pytorch/gpu_time.py), queued before the step's own kernels: what a real
model's decode step spends reading its weights (an 8B model: 16 GB at an H100's 3.35 TB/s,
about 5 ms), which a small test model does not (on tandem's simulated GPU its step is mostly
host time).

Both end after --seconds with a summary line (p50/p99 of TTFT and TPOT, or tokens per second).
--pause-file: nothing is started while the file exists (a harness's switch).
--tandem-requests (serve): each request is reported to tandem through its client API
(tandem_request_begin at arrival, tandem_request_end at its last token) when libtandem is
loaded. Without it tandem delimits requests itself: every engine step ends with a host
synchronization (the sampled tokens are copied back), so under TANDEM_ROLE=inference each step
is one request to tandem and its latency is the step's, the TPOT.

    python3 examples/vllm/llm_workload.py serve /tmp/tiny-llama --seconds 20 --rate 4
    python3 examples/vllm/llm_workload.py batch /tmp/tiny-llama --seconds 20 --batch 32

On tandem's simulated GPU set VLLM_USE_V2_MODEL_RUNNER=0 (docs/simgpu.md); on a GPU, nothing.
"""
import argparse
import ctypes
import json
import os
import random
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pytorch"))
from gpu_time import GpuTime  # noqa: E402


def percentile(values, q):
    v = sorted(values)
    return v[min(len(v) - 1, int(q * len(v)))] if v else None


def tandem_requests():
    """libtandem's request API when it is loaded in this process, else None."""
    lib = ctypes.CDLL(None)
    try:
        begin, end = lib.tandem_request_begin, lib.tandem_request_end
    except AttributeError:
        return None
    begin.argtypes, begin.restype = [ctypes.c_ulonglong], ctypes.c_ulonglong
    end.argtypes, end.restype = [ctypes.c_ulonglong], None
    return begin, end


def paused(path):
    return bool(path) and os.path.exists(path)


def serve(args, llm, SamplingParams):
    import torch
    engine = llm.llm_engine
    gpu = GpuTime(torch, args.gpu_ms, args.kernel_ms)
    params = SamplingParams(max_tokens=args.max_tokens, ignore_eos=True, detokenize=False)
    api = tandem_requests() if args.tandem_requests else None
    rng = random.Random(args.seed)
    open_requests, done, n = {}, [], 0
    start = time.monotonic()
    next_arrival = start + rng.expovariate(args.rate)
    while time.monotonic() - start < args.seconds or open_requests:
        now = time.monotonic()
        while next_arrival <= now and now - start < args.seconds:
            if paused(args.pause_file):
                next_arrival = now + rng.expovariate(args.rate)  # arrivals resume later, none queued
                continue
            n += 1
            prompt = [3 + (n + i) % 1000 for i in range(args.prompt)]
            begin = api[0](int(next_arrival * 1e9)) if api else 0
            open_requests[str(n)] = {"arrival": next_arrival, "first": None, "begin": begin}
            engine.add_request(str(n), {"prompt_token_ids": prompt}, params)
            next_arrival += rng.expovariate(args.rate)
        if not open_requests:
            time.sleep(max(0.0, min(next_arrival - time.monotonic(), 0.01)))
            continue
        gpu.launch()  # the step's weight reads (--gpu-ms), before its own kernels on the same stream
        for out in engine.step():
            r = open_requests.get(out.request_id)
            if r is None:
                continue
            t = time.monotonic()
            if r["first"] is None and out.outputs and out.outputs[0].token_ids:
                r["first"] = t
            if out.finished:
                del open_requests[out.request_id]
                if api:
                    api[1](r["begin"])
                tokens = len(out.outputs[0].token_ids)
                rec = {"request": int(out.request_id), "t": round(time.time() - (t - r["arrival"]), 4),
                       "ttft_ms": round(1e3 * (r["first"] - r["arrival"]), 3),
                       "tpot_ms": round(1e3 * (t - r["first"]) / max(1, tokens - 1), 3), "tokens": tokens}
                done.append(rec)
                if args.log_requests:
                    print(json.dumps(rec), flush=True)
    ttft, tpot = [r["ttft_ms"] for r in done], [r["tpot_ms"] for r in done]
    return {"requests": len(done), **gpu.describe(), "ttft_p50_ms": percentile(ttft, 0.5), "ttft_p99_ms": percentile(ttft, 0.99),
            "tpot_p50_ms": percentile(tpot, 0.5), "tpot_p99_ms": percentile(tpot, 0.99)}


def batch(args, llm, SamplingParams):
    params = SamplingParams(max_tokens=args.max_tokens, ignore_eos=True, detokenize=False)
    prompts = [{"prompt_token_ids": [3 + (i + j) % 1000 for j in range(args.prompt)]} for i in range(args.batch)]
    start, rounds, tokens = time.monotonic(), 0, 0
    while time.monotonic() - start < args.seconds:
        if paused(args.pause_file):
            time.sleep(0.05)
            continue
        t = time.monotonic()
        outs = llm.generate(prompts, params, use_tqdm=False)
        n = sum(len(o.outputs[0].token_ids) for o in outs)
        rounds, tokens = rounds + 1, tokens + n
        if args.log_requests:
            print(json.dumps({"round": rounds, "t": round(time.time(), 4), "tokens": n,
                              "tokens_per_s": round(n / (time.monotonic() - t), 1)}), flush=True)
    elapsed = time.monotonic() - start
    return {"rounds": rounds, "tokens": tokens, "tokens_per_s": round(tokens / elapsed, 1)}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", choices=["serve", "batch"])
    parser.add_argument("model", help="a local model directory (tiny_model.py writes one)")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--rate", type=float, default=4.0, help="serve: Poisson arrivals a second (default 4)")
    parser.add_argument("--batch", type=int, default=32, help="batch: prompts per generate (default 32)")
    parser.add_argument("--prompt", type=int, default=32, help="prompt tokens (default 32)")
    parser.add_argument("--max-tokens", type=int, default=32, help="output tokens per request (default 32)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--gpu-ms", type=float, default=0.0, help="serve: GPU time added to each engine step (default 0)")
    parser.add_argument("--kernel-ms", type=float, default=0.5, help="length of one of those kernels (default 0.5)")
    parser.add_argument("--eager", action="store_true", help="enforce_eager: no torch.compile, no CUDA graphs")
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.5)
    parser.add_argument("--kv-cache-memory-bytes", type=int, default=None)
    parser.add_argument("--pause-file")
    parser.add_argument("--log-requests", action="store_true")
    parser.add_argument("--tandem-requests", action="store_true")
    args = parser.parse_args()
    if (args.seconds <= 0 or args.rate <= 0 or args.batch < 1 or args.prompt < 1 or args.max_tokens < 2
            or args.gpu_ms < 0 or args.kernel_ms <= 0):
        parser.error("--seconds > 0, --rate > 0, --batch >= 1, --prompt >= 1, --max-tokens >= 2, --gpu-ms >= 0, "
                     "--kernel-ms > 0")
    from vllm import LLM, SamplingParams
    llm = LLM(model=args.model, load_format="dummy", skip_tokenizer_init=True, max_model_len=1024, seed=0,
              enforce_eager=args.eager, gpu_memory_utilization=args.gpu_memory_utilization,
              kv_cache_memory_bytes=args.kv_cache_memory_bytes)
    # Warm-up: the first requests pay for lazy initialisation.
    llm.generate([{"prompt_token_ids": [3] * args.prompt}], SamplingParams(max_tokens=4, ignore_eos=True),
                 use_tqdm=False)
    print(json.dumps({"ready": round(time.time(), 4)}), flush=True)
    summary = (serve if args.mode == "serve" else batch)(args, llm, SamplingParams)
    print(json.dumps({"example": f"vllm-{args.mode}", **summary}), flush=True)
    os._exit(0)  # skip vLLM's shutdown at exit


if __name__ == "__main__":
    main()
