#!/usr/bin/env python3
"""vLLM under test: starts an LLM once (in this process: VLLM_ENABLE_V1_MULTIPROCESSING=0) on a
model directory of examples/vllm/tiny_model.py, prints what it sees, then does what stdin says,
one command a line, printing one JSON line after each (vllm_e2e.py drives it):

  generate     a batch of 8 prompts x 16 tokens (ignore_eos): {"tokens": [...]}
  sleep        llm.sleep(level=1): weights to the CPU, the KV cache dropped
  wake         llm.wake_up()
  loop         generate until killed (prints "looping" first)
  quit

The first line: {"ready": ..., "num_gpu_blocks", "kv_cache_bytes", "mem_get_info" (the
quota's view through cuMemGetInfo), "nvml" (total and free through NVML)}. An exception in a
command prints {"error": "<type>: <message>"} and the probe goes on.

usage: vllm_probe.py MODEL_DIR JSON_LLM_ARGS
"""
import ctypes
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "vllm"))
import tiny_model  # noqa: E402
from probe_commands import answer_commands, say  # noqa: E402


def nvml_memory():
    from vllm.third_party import pynvml
    pynvml.nvmlInit()
    m = pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(0))
    return {"total": m.total, "free": m.free}


def main():
    model, llm_args = sys.argv[1], json.loads(sys.argv[2])
    t0 = time.monotonic()
    import torch
    from vllm import LLM, SamplingParams
    llm = LLM(model=model, load_format="dummy", skip_tokenizer_init=True, max_model_len=512, seed=0, **llm_args)
    cfg = json.load(open(os.path.join(model, "config.json")))
    blocks = llm.llm_engine.vllm_config.cache_config.num_gpu_blocks
    block_size = llm.llm_engine.vllm_config.cache_config.block_size
    say(ready=round(time.monotonic() - t0, 1), num_gpu_blocks=blocks,
        kv_cache_bytes=blocks * block_size * tiny_model.kv_bytes_per_token(cfg),
        mem_get_info=list(torch.cuda.mem_get_info()), nvml=nvml_memory(), pid=os.getpid())
    params = SamplingParams(max_tokens=16, ignore_eos=True, detokenize=False)
    prompts = [{"prompt_token_ids": [3 + i, 5, 7, 9]} for i in range(8)]

    def generate():
        return [len(o.outputs[0].token_ids) for o in llm.generate(prompts, params, use_tqdm=False)]

    def sleep():
        llm.sleep(level=1)
        return {"slept": True, "mem_get_info": list(torch.cuda.mem_get_info())}

    def wake():
        llm.wake_up()
        return {"woke": True, "mem_get_info": list(torch.cuda.mem_get_info())}

    def loop():
        say(looping=True)
        while True:
            generate()

    answer_commands({"generate": lambda: {"tokens": generate()}, "sleep": sleep, "wake": wake, "loop": loop,
                     "quit": lambda: {"quit": True}})
    sys.stdout.flush()
    write_stats = getattr(ctypes.CDLL(None), "tandem_write_stats", None)  # libtandem's, when preloaded
    if write_stats:
        write_stats()
    os._exit(0)  # vLLM's shutdown at exit is not what is tested (and skips the stats at exit)


if __name__ == "__main__":
    main()
