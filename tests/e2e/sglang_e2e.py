#!/usr/bin/env python3
"""SGLang under tandem on the simulated GPU, with SGLang's defaults (CUDA graphs, the overlap
scheduler, its scheduler and detokenizer in processes of their own). SGLang comes from
.venv-sglang/ (scripts/setup-venv.sh --sglang); without it the test is skipped (exit 77) with
the reason. The model is a directory with only a config.json (examples/vllm/tiny_model.py),
its weights SGLang's dummy ones, its prompts token ids: no hub, no download. Each case starts
SGLang once (a minute or two of CPU, most of it capturing CUDA graphs) with the role inference
and a 4 GiB quota on a 16 GiB GPU, and SGLang's `nvidia-smi` finds the simulated GPU's
(build/simgpu/nvidia-smi, over NVML).

  engine   the offline Engine (tests/e2e/sglang_probe.py): SGLang's own query of the GPU's
           memory (`nvidia-smi --query-gpu=memory.total`, run as its own process) answers the
           quota, which nvidia-smi outside tandem does not; the KV cache is sized inside the
           quota (mem_fraction_static x quota); it generates; tandemd sees the engine's
           processes with the role inference, the scheduler's launches and its memory; shutdown
           kills the scheduler (SIGKILL), and what it launched is still reported by tandemd
           (tandemctl status's departed processes, the metrics' departed launches).
  server   the HTTP server (python -m sglang.launch_server) with the pool (TANDEM_MEM_POOL=1),
           tandemd's policy slo and a training process (train-sim) beside it: /generate with
           token ids answers; tandemd measures SGLang's engine steps as requests and holds
           training for them; killed (SIGKILL, every process of it) in the middle of a long
           generation, its pooled chunks return to the pool, tandemd forgets its processes, the
           scheduler's launches are reported as departed, and training runs ungated again
           within a control period.

usage: sglang_e2e.py BUILD_DIR CASE
"""
import atexit
import glob
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from e2e_util import check, free_port, metric_value, metrics_page, preload, run_case, slots_by_pid, wait_for  # noqa: E402
from engine_probe import EngineProbe, pool_free, process_mem, require_module  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PYTHON = os.path.join(ROOT, ".venv-sglang", "bin", "python")
PROBE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sglang_probe.py")
GiB = 1 << 30
MiB = 1 << 20
sys.path.insert(0, os.path.join(ROOT, "examples", "vllm"))
import tiny_model  # noqa: E402

QUOTA, FRACTION = 4 * GiB, 0.5
# What keeps SGLang offline and quiet; nothing here changes how it runs.
SGLANG_ENV = {"HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "SGLANG_DISABLE_REQUEST_LOGGING": "1"}
PROMPTS = [[3 + i, 5, 7, 9] for i in range(8)]


def in_use(path):
    """Whether a live process holds `path` open or mapped."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if any(os.readlink(f"/proc/{pid}/fd/{fd}") == path for fd in os.listdir(f"/proc/{pid}/fd")):
                return True
            with open(f"/proc/{pid}/maps") as maps:
                if path in maps.read():
                    return True
        except OSError:  # gone, or not ours to read
            continue
    return False


def remove_leaked_segments(env, before):
    """SGLang's processes die by SIGKILL (its shutdown, and the kill this test makes), so its load
    snapshots in /dev/shm are never unlinked: the ones this test's SGLang made, which no live
    process holds (another SGLang test may be running beside it), go with the test."""
    env.kill_started()  # what the test started is gone first (a failed check may leave it running)
    for path in set(glob.glob("/dev/shm/sglang_loads_*")) - before:
        if not in_use(path):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass


def setup(env, policy="fill"):
    """tandemd, a 16 GiB simulated GPU, and the simulated GPU's nvidia-smi first on PATH."""
    require_module(PYTHON, "sglang", "scripts/setup-venv.sh --sglang")
    atexit.register(remove_leaked_segments, env, set(glob.glob("/dev/shm/sglang_loads_*")))
    simgpu = os.path.join(env.build, "simgpu")
    env.base.update(SIMGPU_MEM_BYTES=str(16 * GiB), PATH=simgpu + os.pathsep + env.base.get("PATH", ""))
    smi = subprocess.run(["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits"], env=env.base,
                         capture_output=True, text=True, timeout=30)
    check(smi.stdout.strip() == "16384", f"nvidia-smi outside tandem reports the whole GPU, 16384 MiB ({smi.stdout.strip()}{smi.stderr.strip()})")
    env.daemon(policy, metrics=True)
    model = os.path.join(env.tmp, "tiny-llama")
    return model, tiny_model.write(model)


def child_pids(pid):
    """The processes `pid` started (SGLang's scheduler and detokenizer among them)."""
    found = []
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/children") as f:
            found += [int(c) for c in f.read().split()]
    return found


def engine_slots(env, pids):
    """tandemd's slots of the processes in `pids`, once one of them has launched."""
    s = env.status_when(lambda s: any(x["launches"] > 0 for p, x in slots_by_pid(s).items() if p in pids), seconds=30)
    return {p: x for p, x in slots_by_pid(s).items() if p in pids}


def departed(env, pid):
    """tandemd's record of `pid` among the processes that left, None until there is one."""
    for d in (env.status() or {}).get("departed", []):
        if d["pid"] == pid:
            return d
    return None


def check_departed(env, pid, launches_seen):
    record = wait_for(lambda: departed(env, pid), 15)
    print("departed:", json.dumps(record))
    check(record and record["role"] == "inference" and record["launches"] >= launches_seen > 0,
          f"tandemctl status still reports the killed scheduler {pid}: {record and record['launches']} launches (>= {launches_seen} seen while it ran)")
    counted = metric_value(metrics_page(env), "tandem_departed_launches_total", role="inference", kind="compute")
    check(counted is not None and counted >= launches_seen, f"the metrics count its launches as departed ({counted})")


def engine_case(env):
    model, cfg = setup(env)
    engine = EngineProbe(env, PYTHON, PROBE, [model, json.dumps({"mem_fraction_static": FRACTION})], SGLANG_ENV,
                         TANDEM_ROLE="inference", TANDEM_MEM_LIMIT="4G")
    ready = engine.answer(timeout=600)
    print("SGLang:", json.dumps(ready))
    fell_back = "Falling back to torch.cuda.mem_get_info" in engine.stderr(100000)
    check(ready["memory_capacity_mib"] == QUOTA // MiB and not fell_back,
          f"SGLang's own nvidia-smi query, under tandem, answers the quota ({ready['memory_capacity_mib']} MiB, fallback: {fell_back})")
    kv, room = ready["kv_cache_bytes"], QUOTA * FRACTION
    check(0.8 * room <= kv <= room, f"the KV cache ({kv / GiB:.2f} GiB) is sized inside mem_fraction_static x quota ({room / GiB:.2f} GiB)")
    check(engine.send("generate", timeout=300)["tokens"] == [16] * 8, "SGLang generates 8 x 16 tokens")

    slots = engine_slots(env, set(child_pids(engine.p.pid)))
    roles = {c["pid"]: c["role"] for c in env.status()["clients"]}
    print("engine processes:", {p: (roles.get(p), x["launches"]) for p, x in slots.items()})
    scheduler = max(slots, key=lambda p: slots[p]["launches"]) if slots else None
    check(scheduler and roles.get(scheduler) == "inference" and slots[scheduler]["launches"] > 0,
          f"tandemd sees the engine's scheduler process {scheduler} with the role inference and its launches")
    held = process_mem(env, scheduler)
    check(held and held["bytes_in_use"] >= kv, f"tandemctl mem counts its KV cache ({held and held['bytes_in_use']} >= {kv})")
    launches_seen = slots_by_pid(env.status())[scheduler]["launches"]

    check(engine.send("quit", timeout=120).get("quit"), "Engine.shutdown() returned")
    check(wait_for(lambda: scheduler not in slots_by_pid(env.status()), 15), "tandemd forgot the scheduler SGLang killed")
    check_departed(env, scheduler, launches_seen)
    engine.p.stdin.close()
    engine.p.wait(timeout=60)


def post(port, path, body, timeout):
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as r:
        return json.loads(r.read())


def server_up(port):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as r:
            return r.status == 200
    except OSError:
        return False


def server_case(env):
    model, cfg = setup(env, policy="slo")
    # Training beside it: 20 ms of kernels and 11.5 ms of data loading a step, for as long as the test.
    training = env.start("train-sim", "--seconds", "900", "--kernel-us", "200", "--compute-kernels", "100",
                         "--gap-us", "11500", role="training")
    port = free_port()
    e = dict(env.base, **SGLANG_ENV, LD_PRELOAD=preload(env.build), TANDEM_ROLE="inference", TANDEM_MEM_LIMIT="4G",
             TANDEM_MEM_POOL="1", TANDEM_SLO_MS="50", TANDEM_STATS_FILE=os.path.join(env.tmp, "stats-%p.json"))
    log = open(os.path.join(env.tmp, "server.log"), "w")
    server = env.popen([PYTHON, "-m", "sglang.launch_server", "--model-path", model, "--load-format", "dummy",
                        "--skip-tokenizer-init", "--mem-fraction-static", str(FRACTION), "--random-seed", "0",
                        "--host", "127.0.0.1", "--port", str(port)], env=e, stdout=log, stderr=subprocess.STDOUT,
                       start_new_session=True)

    def log_tail():
        with open(log.name) as f:
            return "".join(f.readlines()[-30:])

    up = wait_for(lambda: server_up(port) or server.poll() is not None, 600) and server.poll() is None
    check(up, f"the SGLang server answers /health\n{log_tail()}")
    out = post(port, "/generate", {"input_ids": PROMPTS, "sampling_params": {"max_new_tokens": 16, "ignore_eos": True}}, 300)
    check([len(o["output_ids"]) for o in out] == [16] * 8, "/generate with token ids answers 8 x 16 tokens")
    slots = engine_slots(env, set(child_pids(server.pid)) | {server.pid})
    scheduler = max(slots, key=lambda p: slots[p]["launches"]) if slots else None
    pooled = (process_mem(env, scheduler) or {}).get("pool_bytes", 0)
    check(scheduler and pooled > 0, f"the server's scheduler {scheduler} holds {pooled / MiB:.0f} MiB of pooled chunks")

    # Killed mid-generation: a long request running, every process of the server killed at once.
    def long_request():
        try:
            post(port, "/generate", {"input_ids": PROMPTS[:1], "sampling_params": {"max_new_tokens": 2000, "ignore_eos": True}}, 600)
        except OSError:  # the server is killed under it, as intended
            pass

    threading.Thread(target=long_request, daemon=True).start()
    serving = env.status_when(lambda s: (s["gpus"][0].get("slo") or {}).get("active")
                              and slots_by_pid(s)[scheduler]["requests"] > 0, seconds=30)
    check(serving, "while SGLang generates, tandemd measures its engine steps as requests and the slo policy is active")
    print("SGLang's slot while serving:", {k: slots_by_pid(serving)[scheduler][k] for k in ("requests", "latency_ms", "gate")})
    held = env.status_when(lambda s: slots_by_pid(s)[training.pid]["gate_waits"] > 0, seconds=10)
    check(held, "training's launches waited at its gate for SGLang's steps")
    time.sleep(1.0)
    launches_seen = slots_by_pid(env.status())[scheduler]["launches"]
    free_before = pool_free(env)
    os.killpg(server.pid, signal.SIGKILL)
    killed = time.monotonic()
    server.wait(timeout=30)
    ungated = env.status_when(lambda s: not (s["gpus"][0].get("slo") or {}).get("active"), seconds=10)
    took = time.monotonic() - killed
    period, idle = 0.2, 0.05  # TANDEM_SLO_PERIOD_MS's and TANDEM_SLO_IDLE_MS's defaults
    check(ungated and took <= period + idle + 0.5,
          f"training runs ungated {took * 1000:.0f} ms after the kill (tandemd's rule: within a control period, "
          f"{period * 1000:.0f} ms, plus the idle time, {idle * 1000:.0f} ms; the check allows 500 ms more for the polling)")
    check(training.poll() is None, "training still runs")
    def server_clients():
        return [c["pid"] for c in (env.status() or {}).get("clients", []) if c["pid"] != training.pid]

    check(wait_for(lambda: not server_clients(), 15), f"tandemd forgot every process of the killed server ({server_clients()})")
    back = wait_for(lambda: pool_free(env) >= free_before + pooled, 15)
    print(f"pooled by the server {pooled}, pool free before the kill {free_before}, after {pool_free(env)}")
    check(back, f"its {pooled / MiB:.0f} MiB of pooled chunks returned to the pool")
    check_departed(env, scheduler, launches_seen)


if __name__ == "__main__":
    run_case({"engine": engine_case, "server": server_case})
