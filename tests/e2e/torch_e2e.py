#!/usr/bin/env python3
"""Real PyTorch (NVIDIA's CUDA runtime, cuBLAS, cuDNN, CUDA graphs, the caching allocator) on
the simulated GPU, under tandem. PyTorch comes from the project's venv (scripts/setup-venv.sh);
without it the test is skipped (exit 77) with the reason.

  ops        without tandem: cuBLAS, cuBLASLt, cuDNN, attention, streams, events, copies,
             inference mode, mem_get_info (torch_probe.py ops), then serve.py
  train      examples/pytorch/train.py twice under libtandem (no daemon): training and graph
             replays finish; launches counted by exact entry point, graph replays counted, and
             the same counts in both runs
  serve      examples/pytorch/serve.py under libtandem: requests answered, launches counted
  quota      TANDEM_MEM_LIMIT is what torch.cuda.mem_get_info reports, and allocating beyond
             it raises torch.OutOfMemoryError (the process goes on)
  pressure   tandem_torch.install(): lowering the quota with tandemctl empties PyTorch's cache
  pool       train.py with TANDEM_MEM_POOL=1 beside tandemd: memory from the pool
  pool-expandable  the same with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (VMM)

usage: torch_e2e.py BUILD_DIR CASE
"""
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from e2e_util import Env, check, ctl, last_json, stats_file, wait_for  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# TANDEM_TEST_PYTHON: another interpreter with PyTorch (a GPU machine's own, scripts/gpu-check.sh).
PYTHON = os.environ.get("TANDEM_TEST_PYTHON") or os.path.join(ROOT, ".venv", "bin", "python")
SKIP = 77


def require_torch():
    if not os.path.exists(PYTHON):
        print(f"SKIP: no PyTorch venv at {PYTHON} (scripts/setup-venv.sh could not create it)")
        sys.exit(SKIP)
    r = subprocess.run([PYTHON, "-c", "import torch"], capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        print(f"SKIP: torch does not import in {PYTHON}: {r.stderr.strip()[-500:]}")
        sys.exit(SKIP)


def run(env, args, tandem=False, timeout=240, **settings):
    """A Python program on the simulated GPU (under libtandem with `tandem`); its last JSON line."""
    e = dict(env.base, **settings)
    if tandem:
        e.update(LD_PRELOAD=os.path.join(env.build, "lib", "libtandem.so"),
                 TANDEM_STATS_FILE=os.path.join(env.tmp, "stats-%p.json"))
    p = subprocess.run([PYTHON, *args], env=e, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        raise SystemExit(f"FAIL: {' '.join(args)} exited with {p.returncode}:\n{p.stderr[-3000:]}")
    return last_json(p.stdout), p


def start(env, args, **settings):
    e = dict(env.base, LD_PRELOAD=os.path.join(env.build, "lib", "libtandem.so"),
             TANDEM_STATS_FILE=os.path.join(env.tmp, "stats-%p.json"), **settings)
    return subprocess.Popen([PYTHON, *args], env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def example(name):
    return os.path.join(ROOT, "examples", "pytorch", name)


PROBE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "torch_probe.py")


def ops_case(env):
    r, _ = run(env, [PROBE, "ops"])
    print("probe:", json.dumps(r))
    check(r["capability"] == [9, 0] and r["sm_count"] == 132, "PyTorch sees an sm_90 with 132 SMs")
    for op, shape in (("matmul", [64, 16]), ("matmul_bf16", [64, 16]), ("addmm", [64, 16]),
                      ("conv", [2, 8, 16, 16]), ("conv_grad", [2, 3, 16, 16]), ("sdpa", [2, 4, 8, 16]),
                      ("inference_mode", [64, 4])):
        check(r[op] == shape, f"{op} runs (cuBLAS/cuBLASLt/cuDNN as it needs) and gives shape {shape}")
    check(r["copy_roundtrip"], "a tensor copied to the GPU and back is unchanged (memory is real)")
    check(r["event_ms"] and r["mem_free_le_total"] and r["mem_total"] == 80 << 30,
          "events time, mem_get_info reports the 80 GiB device")
    s, _ = run(env, [example("serve.py"), "--requests", "5"])
    check(s["requests"] == 5, f"serve.py answers its requests: {s}")


def train_case(env):
    runs = []
    for _ in range(2):
        r, p = run(env, [example("train.py"), "--steps", "3", "--replays", "4"], tandem=True, TANDEM_ROLE="training")
        runs.append((r, stats_file(env, find_pid(env, None))))
    (r1, s1), (r2, s2) = runs
    l1, l2 = s1["launches"], s2["launches"]
    print("launches:", json.dumps(l1))
    check(r1["steps"] == 3 and r1["replays"] == 4, f"train.py trained and replayed its graph: {r1}")
    graph_entries = {k: v for k, v in l1["by_entry"].items() if k.startswith("cuGraphLaunch")}
    check(sum(graph_entries.values()) == 4 and l1["graph_launches"] == 4,
          f"the 4 graph replays are counted, by entry point: {graph_entries}")
    check(l1["graph_kernels"] > 0, f"the replayed graphs' kernels are counted ({l1['graph_kernels']})")
    kernel_entries = {k: v for k, v in l1["by_entry"].items() if not k.startswith("cuGraphLaunch")}
    check(sum(kernel_entries.values()) > 0, f"kernel launches are counted by exact entry point: {kernel_entries}")
    check(l1["capture_skipped"] > 0, f"launches captured into the graph are not counted as run ({l1['capture_skipped']})")
    check(l1 == l2, f"the same counts in two runs of the same program ({l1['total']} and {l2['total']} launches)")


_seen_pids = set()


def find_pid(env, _runs):
    """The stats file written by the run that just ended (one new file per run)."""
    files = {f for f in os.listdir(env.tmp) if f.startswith("stats-") and f.endswith(".json")}
    new = sorted(files - _seen_pids)
    _seen_pids.update(new)
    if len(new) != 1:
        raise SystemExit(f"FAIL: expected one new stats file, found {new}")
    return int(new[0][len("stats-"):-len(".json")])


def serve_case(env):
    r, p = run(env, [example("serve.py"), "--requests", "10"], tandem=True, TANDEM_ROLE="inference")
    s = stats_file(env, find_pid(env, None))
    check(r["requests"] == 10, f"serve.py answered its 10 requests under tandem: {r}")
    check(s["launches"]["total"] > 0 and s["launches"]["by_entry"], f"its launches are counted: {s['launches']}")


def quota_case(env):
    r, _ = run(env, [PROBE, "quota"], tandem=True, TANDEM_MEM_LIMIT="512M")
    print("probe:", json.dumps(r))
    check(r["total"] == 512 << 20, f"torch.cuda.mem_get_info reports the 512 MiB quota as the GPU ({r['total']})")
    check(r["oom"] is not None, f"allocating beyond the quota raises torch.OutOfMemoryError: {r['oom']}")
    check(r["small_ok"] == 32 << 20, "the process goes on allocating within the quota afterwards")
    s = stats_file(env, find_pid(env, None))["memory"]
    check(s["quota_refusals"] >= 1, f"tandem counted the refusal: {s}")


def pressure_case(env):
    d = env.daemon()
    try:
        p = start(env, [PROBE, "pressure", ROOT], TANDEM_ROLE="training")
        line = p.stdout.readline()
        ready = json.loads(line) if line.startswith("{") else None
        check(ready and ready["installed"] and ready["reserved"] >= 64 << 20,
              f"the process holds its freed 64 MiB in PyTorch's cache, tandem_torch installed: {ready}")
        registered = wait_for(lambda: ctl(env, "mem", "--json").stdout.count(f'"pid": {p.pid}') or
                              str(p.pid) in ctl(env, "mem").stdout, seconds=10)
        check(registered, "tandemctl mem lists it")
        check(ctl(env, "mem", "--set", str(p.pid), "16M").returncode == 0, "its quota is lowered to 16 MiB")
        out, err = p.communicate(timeout=60)
        r = last_json(out)
        check(p.returncode == 0 and r["reserved"] == 0, f"tandem_torch's callback emptied the cache: {r}"
              + ("" if p.returncode == 0 else err[-2000:]))
        m = stats_file(env, p.pid)["memory"]
        check(m["pressure_calls"] >= 1 and m["reported_release_bytes"] >= 64 << 20,
              f"the release was reported to tandem: {m}")
    finally:
        d.terminate()
        d.wait()


def pool_case(env, expandable):
    nvml = os.path.join(env.build, "simgpu", "libnvidia-ml.so.1")
    if expandable and not os.path.exists(nvml):
        # PyTorch's expandable segments ask NVML about fabric access on sm_90 and call through a
        # null pointer when libnvidia-ml.so.1 is absent (a real GPU machine always has it).
        print(f"SKIP: expandable segments need the simulated NVML ({nvml}), which this build lacks")
        sys.exit(SKIP)
    d = env.daemon()
    extra = {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"} if expandable else {}
    try:
        p = start(env, [example("train.py"), "--steps", "3", "--replays", "2"], TANDEM_ROLE="training",
                  TANDEM_MEM_POOL="1", **extra)
        seen = wait_for(lambda: any(s["pid"] == p.pid and s["pool_bytes"] > 0
                                    for g in (env.status() or {"gpus": []})["gpus"] for s in g["slots"]), seconds=90)
        out, err = p.communicate(timeout=240)
        check(p.returncode == 0, "train.py finished on pooled memory" + ("" if p.returncode == 0 else f": {err[-2000:]}"))
        r = last_json(out)
    finally:
        d.terminate()
        d.wait()
    check(r["steps"] == 3 and r["replays"] == 2, f"training and graph replays finished: {r}")
    check(seen, "tandemd served the process's memory from its pool while it ran")
    m = stats_file(env, p.pid)["memory"]
    check(m["allocs"] > 0 and m["peak_bytes"] > 0, f"its allocations were counted: {m}")


def main():
    build, case = sys.argv[1], sys.argv[2]
    require_torch()
    env = Env(build)
    t0 = time.monotonic()
    {"ops": ops_case, "train": train_case, "serve": serve_case, "quota": quota_case, "pressure": pressure_case,
     "pool": lambda e: pool_case(e, False), "pool-expandable": lambda e: pool_case(e, True)}[case](env)
    print(f"torch e2e {case}: ok ({time.monotonic() - t0:.0f} s)")


if __name__ == "__main__":
    main()
