#!/usr/bin/env python3
"""SGLang under test: starts SGLang's offline Engine once, with its defaults (CUDA graphs, the
overlap scheduler, its scheduler and detokenizer in processes of their own), on a model
directory of examples/vllm/tiny_model.py with dummy weights and token-id prompts, prints what it
sees, then does what stdin says, one command a line, printing one JSON line after each
(sglang_e2e.py drives it):

  generate     8 prompts x 16 tokens (ignore_eos): {"tokens": [...]}
  quit         Engine.shutdown(), which kills its scheduler process: {"quit": true}

The first line: {"ready": seconds, "max_total_num_tokens", "kv_cache_bytes",
"memory_capacity_mib" (what SGLang's own get_device_memory_capacity() answers: it runs
`nvidia-smi --query-gpu=memory.total`), "pid"}.

usage: sglang_probe.py MODEL_DIR JSON_ENGINE_ARGS
"""
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "vllm"))
import tiny_model  # noqa: E402
from probe_commands import answer_commands, say  # noqa: E402


def main():
    model, engine_args = sys.argv[1], json.loads(sys.argv[2])
    t0 = time.monotonic()
    import sglang
    from sglang.srt.utils.common import get_device_memory_capacity
    engine = sglang.Engine(model_path=model, load_format="dummy", skip_tokenizer_init=True, random_seed=0,
                           **engine_args)
    cfg = json.load(open(os.path.join(model, "config.json")))
    tokens = engine.get_server_info()["max_total_num_tokens"]
    say(ready=round(time.monotonic() - t0, 1), max_total_num_tokens=tokens,
        kv_cache_bytes=tokens * tiny_model.kv_bytes_per_token(cfg), memory_capacity_mib=get_device_memory_capacity(),
        pid=os.getpid())
    prompts = [[3 + i, 5, 7, 9] for i in range(8)]
    params = {"max_new_tokens": 16, "ignore_eos": True, "temperature": 0}

    def generate():
        return {"tokens": [len(o["output_ids"]) for o in engine.generate(input_ids=prompts, sampling_params=params)]}

    def shutdown():
        engine.shutdown()
        return {"quit": True}

    answer_commands({"generate": generate, "quit": shutdown})


if __name__ == "__main__":  # SGLang starts its processes with spawn: they import this file
    main()
