#!/usr/bin/env python3
"""PyTorch's memory on tandem's pool (docs/memory.md, "PyTorch on the pool"), on the simulated
GPU. PyTorch comes from the project's venv; without it the test is skipped (exit 77).

  allocator  with TANDEM_MEM_POOL=1 and TANDEM_MEM_TORCH_BACKEND=async an unmodified PyTorch program runs on its stream-ordered
             backend (libtandem sets PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync as it
             loads): every tensor's memory comes from the pool and goes back to it when freed;
             torch.cuda.memory_allocated/memory_reserved and their peaks report the pool's
             blocks and chunks; torch.cuda.empty_cache gives idle chunks back. A user's own
             PYTORCH_CUDA_ALLOC_CONF, and the default TANDEM_MEM_TORCH_BACKEND=keep, leave PyTorch's
             caching allocator in place.
  handover   a 1 GiB GPU (SIMGPU_MEM_BYTES, one budget for all processes). An unmodified
             PyTorch training job whose first step took more memory than its steps now use
             (a batch of 1024, then 512) shares it with an inference server that loads a
             320 MiB model on a request after 300 ms idle (about every 0.8 s). With PyTorch's
             caching allocator (TANDEM_MEM_TORCH_BACKEND=keep: the baseline) training keeps
             what it reserved: tandemd's request for memory finds nothing idle, the server's
             loads wait TANDEM_MEM_HANDOVER_MS for nothing and fail; with the stream-ordered
             backend (TANDEM_MEM_TORCH_BACKEND=async) the memory no live tensor uses is idle in the pool and
             moves at once: loads are served (fewer requests fail: those of the first seconds,
             while training's working set still counts its first step), memory moves in
             milliseconds (every handover under 250 ms), training runs every step without running
             out of memory (tandemd leaves it its working set), and its chunks stay with it
             between handovers (it gives back what it holds over its quota only when asked).
"""
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from e2e_util import Env, check, finish, last_json, slots_by_pid, stats_file  # noqa: E402
from torch_e2e import PYTHON, example, require_torch, start  # noqa: E402

MIB = 1 << 20

# A probe: the allocator PyTorch chose and what it reports around 5 x 64 MiB allocated, freed,
# and the cache emptied; first, a tensor of 8 MiB made and dropped 20 times (reuse in stream order).
PROBE = r"""
import json, torch
def figures():
    return {"allocated": torch.cuda.memory_allocated(), "reserved": torch.cuda.memory_reserved(),
            "max_allocated": torch.cuda.max_memory_allocated()}
for _ in range(20):
    x = torch.empty(8 << 20, dtype=torch.uint8, device="cuda")
    del x
churned = figures()
xs = [torch.empty(64 << 20, dtype=torch.uint8, device="cuda") for _ in range(5)]
torch.cuda.synchronize()
held = figures()
del xs
freed = figures()
torch.cuda.reset_peak_memory_stats()
reset = figures()
torch.cuda.empty_cache()
emptied = figures()
print(json.dumps({"backend": torch.cuda.get_allocator_backend(), "churned": churned, "held": held, "freed": freed,
                  "reset": reset, "emptied": emptied}))
"""


def probe(env, **settings):
    """The probe under libtandem with the pool: its report and its stats file."""
    e = dict(env.base, LD_PRELOAD=os.path.join(env.build, "lib", "libtandem.so"), TANDEM_MEM_POOL="1",
             TANDEM_STATS_FILE=os.path.join(env.tmp, "stats-%p.json"), **settings)
    p = subprocess.Popen([PYTHON, "-c", PROBE], env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = p.communicate(timeout=300)
    if p.returncode != 0:
        raise SystemExit(f"FAIL: the probe exited with {p.returncode}:\n{err[-3000:]}")
    return last_json(out), stats_file(env, p.pid)


def allocator(env):
    r, s = probe(env, TANDEM_MEM_TORCH_BACKEND="async")
    pool = s["memory"]["pool"]
    check(r["backend"] == "cudaMallocAsync", f"PyTorch runs on its stream-ordered backend ({r['backend']})")
    check(s["memory"]["allocs"] >= 5 and pool["chunks_created"] >= 10,
          f"its tensors' memory came from tandem's pool ({s['memory']['allocs']} allocations, "
          f"{pool['chunks_created']} chunks made)")
    check(pool["stream_reuses"] >= 19 and r["churned"]["reserved"] <= 32 * MIB,
          f"a tensor made and dropped 20 times took its block back at once, on its stream ({pool['stream_reuses']} "
          f"reuses; {r['churned']['reserved'] >> 20} MiB held for one live tensor of 8 MiB)")
    held, freed, reset, emptied = r["held"], r["freed"], r["reset"], r["emptied"]
    check(held["allocated"] >= 320 * MIB and held["reserved"] >= held["allocated"],
          f"memory_allocated/reserved report the pool's blocks and chunks ({held['allocated'] >> 20} / "
          f"{held['reserved'] >> 20} MiB with 320 MiB of tensors)")
    check(freed["allocated"] < 32 * MIB and freed["reserved"] >= 320 * MIB and freed["max_allocated"] >= 320 * MIB,
          f"freed: allocated {freed['allocated'] >> 20} MiB, the chunks still held ({freed['reserved'] >> 20} MiB), "
          f"the peak kept ({freed['max_allocated'] >> 20} MiB)")
    check(reset["max_allocated"] < 32 * MIB, f"reset_peak_memory_stats resets the peak ({reset['max_allocated'] >> 20} MiB)")
    check(emptied["reserved"] < 64 * MIB and pool["chunks_released"] >= 10,
          f"empty_cache gives the idle chunks back ({emptied['reserved'] >> 20} MiB reserved after, "
          f"{pool['chunks_released']} chunks released)")
    r, _ = probe(env, TANDEM_MEM_TORCH_BACKEND="async", PYTORCH_CUDA_ALLOC_CONF="expandable_segments:False")
    check(r["backend"] == "native", f"a PYTORCH_CUDA_ALLOC_CONF of the user's stands ({r['backend']})")
    r, _ = probe(env)
    check(r["backend"] == "native", f"by default (TANDEM_MEM_TORCH_BACKEND=keep) the caching allocator stays ({r['backend']})")


def run_pair(env, backend, seconds):
    """Training and the server on a 1 GiB GPU under tandemd: their results and the server's pool figures."""
    d = env.daemon()
    shared = dict(TANDEM_MEM_POOL="1", TANDEM_MEM_WATERMARK="", TANDEM_MEM_TORCH_BACKEND=backend)
    train = start(env, [example("train.py"), "--seconds", str(seconds), "--replays", "0", "--batch", "512",
                        "--dim", "128", "--warmup-steps", "1", "--warmup-batch", "1024", "--log-steps"],
                  TANDEM_ROLE="training", **shared)
    # The server starts once training's first step took its memory.
    deadline = time.monotonic() + 240
    ready = None
    while time.monotonic() < deadline and train.poll() is None:
        line = train.stdout.readline()
        if '"ready"' in line:
            ready = line
            break
    check(ready is not None, f"training ({backend}) finished its first step")
    server = env.start("infer-sim", "--seconds", str(seconds - 4), "--rate", "1.25", "--models", "1",
                       "--model-mb", "320", "--idle-ms", "300", "--mem-mb", "0", "--kernel-us", "200",
                       role="inference", **shared)
    st = env.status_when(lambda s: server.pid in slots_by_pid(s), (server,))
    time.sleep(seconds / 2)
    mid = env.status() or st
    working_set = slots_by_pid(mid).get(train.pid, {}).get("working_set_bytes", 0)
    served = finish(server, timeout=seconds + 60)
    out, err = train.communicate(timeout=seconds + 120)
    d.terminate()
    d.wait()
    check(train.returncode == 0, f"training ({backend}) ran every step without running out of memory "
                                 f"(exit {train.returncode}{': ' + err[-1500:] if train.returncode else ''})")
    trained = last_json(out)
    trained["working_set_mib"] = working_set >> 20
    trained["pool"] = stats_file(env, train.pid)["memory"]["pool"]
    return trained, served, stats_file(env, server.pid)["memory"]["pool"]


def handover(env):
    env.base.update(SIMGPU_MEM_BYTES=str(1 << 30), SIMGPU_MEM_SHARED="1")
    seconds = 16
    keep = run_pair(env, "keep", seconds)
    tandem = run_pair(env, "async", seconds)
    for name, (t, s, pool) in (("caching allocator", keep), ("stream-ordered backend", tandem)):
        mean = pool["handover_ns_total"] / pool["handovers"] / 1e6 if pool["handovers"] else 0
        print(f"{name}: training {t['steps_per_s']} steps/s ({t['steps']} steps, working set "
              f"{t['working_set_mib']} MiB mid-run); server {s['cold_starts']} loads, "
              f"{s['failed']} requests failed, load p50 {s['load_p50_ms']:.1f} ms max {s['load_max_ms']:.1f} ms; "
              f"{pool['handovers']} handovers, mean {mean:.1f} ms, p50 {pool['handover_ns_p50'] / 1e6:.1f} ms, "
              f"p99 {pool['handover_ns_p99'] / 1e6:.1f} ms, longest {pool['handover_ns_max'] / 1e6:.1f} ms "
              f"(zero-fill {pool['zero_ns_total'] / 1e6:.1f} ms in all); training's chunks: "
              f"{t['pool']['chunks_received']} received, {t['pool']['chunks_released']} given back, "
              f"{t['pool']['syncs']} synchronizations")
    (_, ks, _), (tt, ts, tpool) = keep, tandem
    check(ks["failed"] > 0 or ks["load_max_ms"] >= 900,
          f"baseline: with the caching allocator the server's loads wait for memory training holds but does not "
          f"use ({ks['failed']} requests failed, longest load {ks['load_max_ms']:.0f} ms)")
    check(ts["cold_starts"] >= 4 and ts["failed"] < ks["failed"],
          f"with the stream-ordered backend loads are served ({ts['cold_starts']} loads, {ts['failed']} requests "
          f"failed against {ks['failed']} with the caching allocator)")
    # The server's first load, in the first seconds, finds training's working set (the most
    # bytes live over the last 2-4 s) still counting its first step (780 MiB: 780 + 320 MiB do
    # not fit in 1 GiB): tandemd takes what is over it, the load is short and its request fails.
    # Every handover takes memory no tensor uses: milliseconds (16-25 ms at most, 600-700 ms
    # when training gave chunks back at every tick and the first load caught some of them).
    n, longest = tpool["handovers"], tpool["handover_ns_max"]
    mean_ms = tpool["handover_ns_total"] / max(1, n) / 1e6
    check(n >= 2 and longest < 250e6 and mean_ms < 50,
          f"memory moved from training to the server ({n} handovers; longest {longest / 1e6:.1f} ms, "
          f"{mean_ms:.1f} ms on average)")
    # Training gives back what it holds over its quota only when tandemd asks: chunks do not go
    # back and forth between its steps (3.4 received a step when it gave back at every tick).
    per_step = tt["pool"]["chunks_received"] / max(1, tt["steps"])
    check(per_step < 1.5, f"training's chunks stay with it between handovers ({per_step:.2f} received a step)")


def main():
    require_torch()
    build, case = sys.argv[1], sys.argv[2]
    env = Env(build)
    {"allocator": allocator, "handover": handover}[case](env)
    print(f"torch memory e2e {case}: ok")


if __name__ == "__main__":
    main()
