#!/usr/bin/env python3
"""vLLM under tandem on the simulated GPU: the engine starts, sizes its KV cache from the quota,
captures its graphs and generates. vLLM comes from .venv-vllm/ (scripts/setup-venv.sh --vllm);
without it the test is skipped (exit 77) with the reason. The model is a directory with only a
config.json (examples/vllm/tiny_model.py), its weights vLLM's dummy ones: no hub, no download.
Each case starts vLLM once (tens of seconds of CPU) and checks several things while it runs
(tests/e2e/vllm_probe.py, driven through its stdin).

  eager        enforce_eager, sleep mode on, TANDEM_MEM_LIMIT=4G, TANDEM_MEM_POOL=1, tandemd
               running, the GPU's memory shared (SIMGPU_MEM_SHARED=1, 16 GiB) with a neighbour
               that holds 13 GiB while vLLM takes its first memory snapshot and frees it while
               vLLM profiles (vLLM asserts that free memory only fell). Checks: vLLM starts and
               generates; cuMemGetInfo and NVML give the quota; the KV cache is sized to it
               (quota x gpu_memory_utilization less weights and activations); tandemctl mem
               counts it; sleep gives the KV cache's memory back, wake-up takes it again (VMM
               memory, counted by handle) and generation goes on; the quota lowered under the use
               (tandemctl mem --set) takes nothing by force, generation goes on, and a wake-up
               that needs more fails with vLLM's error instead of hanging; vLLM killed mid-step
               gives its pooled chunks back.
  graphs       the default: torch.compile and CUDA graphs (piecewise and full), under tandem with
               a quota: generates; tandem counted graph launches and the launches it skipped
               while vLLM captured.
  small_quota  a quota smaller than the model's weights: vLLM fails at start with its own
               out-of-memory error, within a bounded time.

On the simulated GPU vLLM runs its V1 model runner (VLLM_USE_V2_MODEL_RUNNER=0, docs/simgpu.md:
the V2 runner keeps its bookkeeping in kernels, which do not run there). VLLM_USE_FLASHINFER_SAMPLER=0
spares the first run FlashInfer's sampler compilation (minutes with pip's nvcc).

usage: vllm_e2e.py BUILD_DIR CASE
"""
import json
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from e2e_util import check, run_case, wait_for  # noqa: E402
from engine_probe import EngineProbe, pool_free, process_mem, require_module  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PYTHON = os.path.join(ROOT, ".venv-vllm", "bin", "python")
PROBE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "vllm_probe.py")
GiB = 1 << 30
sys.path.insert(0, os.path.join(ROOT, "examples", "vllm"))
import tiny_model  # noqa: E402

# What vLLM needs on the simulated GPU only, and what keeps it offline.
VLLM_ENV = {"VLLM_USE_V2_MODEL_RUNNER": "0", "VLLM_ENABLE_V1_MULTIPROCESSING": "0", "HF_HUB_OFFLINE": "1",
            "VLLM_USE_FLASHINFER_SAMPLER": "0", "VLLM_NO_USAGE_STATS": "1", "TOKENIZERS_PARALLELISM": "false"}


def require_vllm():
    require_module(PYTHON, "vllm", "scripts/setup-venv.sh --vllm")


def Probe(env, model, llm_args, **settings):
    return EngineProbe(env, PYTHON, PROBE, [model, json.dumps(llm_args)], VLLM_ENV, **settings)


NEIGHBOUR = r"""
import ctypes, sys
cuda = ctypes.CDLL("libcuda.so.1")
ctx, p = ctypes.c_void_p(), ctypes.c_uint64()
assert cuda.cuInit(0) == 0 and cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0) == 0 and cuda.cuCtxSetCurrent(ctx) == 0
assert cuda.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(int(sys.argv[1]))) == 0
print("holding", flush=True)
sys.stdin.readline()
assert cuda.cuMemFree_v2(p) == 0
print("freed", flush=True)
sys.stdin.readline()
"""


def eager_case(env):
    require_vllm()
    model = os.path.join(env.tmp, "tiny-llama")
    tiny_model.write(model)
    quota, util = 4 * GiB, 0.5
    shared = dict(SIMGPU_MEM_SHARED="1", SIMGPU_MEM_BYTES=str(16 * GiB))
    env.base.update(shared)
    env.daemon("fill")
    # The neighbour holds 13 of the GPU's 16 GiB while vLLM starts: the device has 3 GiB free,
    # less than vLLM's quota. It frees them once vLLM has taken its first snapshot.
    neighbour = env.popen([sys.executable, "-c", NEIGHBOUR, str(13 * GiB)], env=env.base, stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, text=True)
    check(neighbour.stdout.readline().strip() == "holding", "the neighbour holds 13 GiB of the 16 GiB GPU")
    vllm = Probe(env, model, {"enforce_eager": True, "enable_sleep_mode": True, "gpu_memory_utilization": util},
                 TANDEM_ROLE="inference", TANDEM_MEM_LIMIT="4G", TANDEM_MEM_POOL="1")
    check(vllm.wait_for_line("Starting to load model", timeout=400), "vLLM took its first memory snapshot")
    neighbour.stdin.write("\n")
    neighbour.stdin.flush()
    check(neighbour.stdout.readline().strip() == "freed", "the neighbour freed its 13 GiB while vLLM loads and profiles")
    ready = vllm.answer(timeout=400)
    print("vLLM:", json.dumps(ready))
    check("num_gpu_blocks" in ready, "vLLM started beside a neighbour that freed 13 GiB during its start")
    free, total = ready["mem_get_info"]
    check(total == quota and ready["nvml"]["total"] == quota, f"cuMemGetInfo and NVML report the 4 GiB quota as the GPU ({total}, {ready['nvml']['total']})")
    kv, want = ready["kv_cache_bytes"], quota * util
    check(0.8 * want <= kv <= want, f"the KV cache ({kv / GiB:.2f} GiB) is sized to quota x utilization ({want / GiB:.2f} GiB)")
    check(vllm.send("generate")["tokens"] == [16] * 8, "vLLM generates 8 x 16 tokens")
    pid = ready["pid"]
    held = process_mem(env, pid)
    check(held and held["bytes_in_use"] >= kv, f"tandemctl mem counts the KV cache ({held and held['bytes_in_use']} >= {kv})")

    # Sleep mode: vLLM's own VMM allocations (cuMemCreate/cuMemMap), counted by handle.
    slept = vllm.send("sleep")
    asleep = wait_for(lambda: (process_mem(env, pid) or {}).get("bytes_in_use", kv) < held["bytes_in_use"] - 0.9 * kv, 5)
    check(slept.get("slept") and asleep, f"sleep gives the KV cache's memory back ({process_mem(env, pid)})")
    woke = vllm.send("wake")
    check(woke.get("woke") and process_mem(env, pid)["bytes_in_use"] >= kv, "wake-up takes it again, counted against the quota")
    check(vllm.send("generate")["tokens"] == [16] * 8, "generation goes on after wake-up")

    # The quota lowered under what vLLM holds: nothing is taken by force.
    out = subprocess.run([os.path.join(env.build, "bin", "tandemctl"), "mem", "--set", str(pid), "1G", "--socket", env.socket],
                         capture_output=True, text=True, timeout=10)
    check(out.returncode == 0, f"tandemctl mem --set {pid} 1G: {out.stderr.strip()}")
    check(vllm.send("generate")["tokens"] == [16] * 8, "with the quota lowered under its use, generation goes on")
    check(vllm.send("sleep").get("slept"), "sleep under the lowered quota")
    t = time.monotonic()
    woke = vllm.send("wake", timeout=120)
    check("error" in woke, f"a wake-up that needs more than the quota fails with vLLM's error in {time.monotonic() - t:.1f} s: {woke.get('error', '')[:200]}")

    # Killed mid-step: its pooled chunks go back to the pool.
    subprocess.run([os.path.join(env.build, "bin", "tandemctl"), "mem", "--set", str(pid), "none", "--socket", env.socket],
                   capture_output=True, timeout=10)
    check(vllm.send("loop").get("looping"), "vLLM generating in a loop")
    time.sleep(1.0)
    pooled, free_before = (process_mem(env, pid) or {}).get("pool_bytes", 0), pool_free(env)
    vllm.p.send_signal(signal.SIGKILL)
    vllm.p.wait(timeout=30)
    gone = wait_for(lambda: process_mem(env, pid) is None, 10)
    check(gone, "the killed vLLM left tandemd's table")
    back = wait_for(lambda: pool_free(env) >= free_before + pooled, 10)
    print(f"pooled by vLLM {pooled}, pool free before the kill {free_before}, after {pool_free(env)}")
    check(pooled > 0 and back, f"its {pooled / 2**20:.0f} MiB of pooled chunks returned to the pool")
    neighbour.stdin.write("\n")
    neighbour.stdin.flush()


def graphs_case(env):
    require_vllm()
    # vLLM keys its torch.compile cache by the model's path, among others: a fixed directory in the
    # build tree (always the same config) lets every run after the first load the compiled graph.
    model = os.path.join(env.build, "vllm-tiny-llama")
    tiny_model.write(model)
    vllm = Probe(env, model, {"gpu_memory_utilization": 0.5}, TANDEM_ROLE="inference", TANDEM_MEM_LIMIT="4G")
    ready = vllm.answer(timeout=580)
    print("vLLM:", json.dumps(ready))
    check(ready["mem_get_info"][1] == 4 * GiB, "vLLM with torch.compile and CUDA graphs started under a 4 GiB quota")
    check(vllm.send("generate")["tokens"] == [16] * 8, "vLLM generates 8 x 16 tokens from its graphs")
    vllm.send("quit")
    vllm.p.wait(timeout=60)
    s = vllm.stats(env)["launches"]
    print("launches:", json.dumps(s))
    check(s["graph_launches"] > 0 and s["graph_kernels"] > 0, f"tandem counted {s['graph_launches']} graph launches ({s['graph_kernels']} kernels in graphs)")
    check(s["capture_skipped"] > 0, f"and skipped {s['capture_skipped']} launches while vLLM captured")
    check(s["by_entry"].get("cuLaunchKernelEx", 0) > 0, "Triton's launches (cuLaunchKernelEx through dlsym) reached the hook")


def small_quota_case(env):
    require_vllm()
    model = os.path.join(env.tmp, "tiny-llama")
    cfg = tiny_model.write(model)
    weights = tiny_model.weight_bytes(cfg)
    quota = weights // 2
    t = time.monotonic()
    vllm = Probe(env, model, {"enforce_eager": True}, TANDEM_ROLE="inference", TANDEM_MEM_LIMIT=str(quota))
    vllm.p.stdin.close()
    code = vllm.p.wait(timeout=400)
    took = time.monotonic() - t
    err = vllm.stderr(400)
    print(err[-1500:])
    check(code != 0, f"vLLM with a quota of {quota} bytes (weights {weights}) exits with an error ({code}) after {took:.0f} s")
    check("out of memory" in err.lower() or "OutOfMemoryError" in err, "vLLM's error says out of memory")


if __name__ == "__main__":
    run_case({"eager": eager_case, "graphs": graphs_case, "small_quota": small_quota_case})
