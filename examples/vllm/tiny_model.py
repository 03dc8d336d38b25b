#!/usr/bin/env python3
"""A small Llama for vLLM without downloading anything: writes a model directory holding only a
config.json. vLLM loads it with load_format="dummy" (weights initialised in place, nothing
read), skip_tokenizer_init=True and prompts given as token ids, with HF_HUB_OFFLINE=1: no hub,
no tokenizer, no weights on disk. The model's size follows the arguments, so its weights and
KV cache per token are known: kv_bytes_per_token() is what vLLM's KV cache holds per token.

    python3 examples/vllm/tiny_model.py /tmp/tiny-llama            # 2 layers, width 256
    python3 examples/vllm/tiny_model.py /tmp/wider --hidden 2048 --layers 4
"""
import argparse
import json
import os

DTYPE_BYTES = 2  # bfloat16


def config(hidden=256, layers=2, heads=4, kv_heads=2, vocab=1024, intermediate=None):
    return {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "hidden_size": hidden, "intermediate_size": intermediate or 2 * hidden,
        "num_hidden_layers": layers, "num_attention_heads": heads, "num_key_value_heads": kv_heads,
        "vocab_size": vocab, "max_position_embeddings": 4096, "rms_norm_eps": 1e-5,
        "torch_dtype": "bfloat16", "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu",
        "rope_theta": 10000.0, "tie_word_embeddings": False,
    }


def write(directory, **kwargs):
    """Writes the model directory (config.json only); returns its config."""
    cfg = config(**kwargs)
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    return cfg


def kv_bytes_per_token(cfg):
    """Bytes of KV cache one token takes: a key and a value per layer and KV head."""
    head_dim = cfg["hidden_size"] // cfg["num_attention_heads"]
    return 2 * cfg["num_hidden_layers"] * cfg["num_key_value_heads"] * head_dim * DTYPE_BYTES


def weight_bytes(cfg):
    """Bytes of the model's weights (embedding, attention, MLP, norms, LM head)."""
    h, i, v, n = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"], cfg["num_hidden_layers"]
    head_dim = h // cfg["num_attention_heads"]
    attention = h * (cfg["num_attention_heads"] + 2 * cfg["num_key_value_heads"]) * head_dim + h * h
    per_layer = attention + 3 * h * i + 2 * h
    return DTYPE_BYTES * (2 * v * h + n * per_layer + h)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("directory")
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--vocab", type=int, default=1024)
    a = parser.parse_args()
    cfg = write(a.directory, hidden=a.hidden, layers=a.layers, vocab=a.vocab)
    print(json.dumps({"model": a.directory, "weight_bytes": weight_bytes(cfg),
                      "kv_bytes_per_token": kv_bytes_per_token(cfg)}))


if __name__ == "__main__":
    main()
