#!/usr/bin/env python3
"""Zico end to end (docs/zico.md): two training jobs whose memory peaks together exceed the GPU.

The simulated GPU has 288 MiB for all its processes (SIMGPU_MEM_SHARED=1). Each job holds
32 MiB of weights and allocates 120 MiB of activations per iteration (8 parts before its 8
forward kernels, freed after its 8 backward kernels): 152 MiB at its peak, 304 MiB for both.
Both use tandem's memory pool. The second job starts a second after the first.

  without  tandemd without TANDEM_ZICO: the peaks meet and a job runs out of memory
  zico     TANDEM_ZICO=1 (budget 240 MiB): both jobs finish every iteration; tandemd learned
           both curves and delayed iteration starts; the second job profiled while the first
           waited at its trough; neither started iterations without its permits
  hostile  the two jobs beside a fake training client (the socket protocol and its own page)
           that claims 1 PiB in use and registers anew every 0.4 s: each job keeps more than half
           the rate it has beside the other alone (each iteration waited the full
           TANDEM_ZICO_MAX_WAIT_MS before: 47 it/s fell to 0.2). Memory is counted per process
           here (not SIMGPU_MEM_SHARED): this case is about holds, `zico` about fitting.
"""
import json
import mmap
import os
import struct
import threading
import time

from e2e_util import PAGE_BYTES, check, last_json, run_case
from hostile_daemon_e2e import HELLO, HELLO_OK, ask, connect

GPU = {"SIMGPU_MEM_SHARED": "1", "SIMGPU_MEM_BYTES": str(288 << 20)}
JOB = ["--mem-mb", "32", "--activations-mb", "120", "--compute-kernels", "8", "--kernel-us", "2000",
       "--comm-us", "500", "--gap-us", "2000"]
SECONDS = 4
OUT_OF_MEMORY = 3  # train-sim's exit status when an activation cannot be allocated


def two_jobs(env, beside=None, shared=True, job_settings=None, **daemon_settings):
    """Runs the two jobs beside tandemd (and `beside(env, status)`, once the first registered); their exit
    statuses and last JSON lines, and the status tandemd showed while both ran. `shared`: the
    GPU's memory is one budget for both (else each process has its own). `job_settings`: TANDEM_*
    settings of both jobs."""
    env.base.update(GPU if shared else {"SIMGPU_MEM_BYTES": GPU["SIMGPU_MEM_BYTES"]})
    d = env.daemon("fill", **daemon_settings)
    job = dict(job_settings or {}, TANDEM_MEM_POOL="1")
    jobs = [env.start("train-sim", "--seconds", str(SECONDS), *JOB, role="training", **job)]
    time.sleep(1.0)
    if beside:
        beside(env, env.registered(jobs[0]))
    jobs.append(env.start("train-sim", "--seconds", str(SECONDS), *JOB, role="training", **job))
    time.sleep(SECONDS - 1.0)
    status = env.status()
    results = []
    for p in jobs:
        out, err = p.communicate(timeout=60)
        results.append((p.returncode, last_json(out), err))
    d.terminate()
    d.wait()
    return results, status


def without(env):
    results, _ = two_jobs(env)
    codes = [r[0] for r in results]
    print("exit statuses:", codes, "; ".join(str(r[1]) for r in results if r[0]))
    check(OUT_OF_MEMORY in codes, "without Zico the peaks meet: a job runs out of memory")


def zico(env):
    results, status = two_jobs(env, TANDEM_ZICO="1", TANDEM_ZICO_BUDGET="240M")
    for code, out, err in results:
        if code:
            print(err[-3000:])
    check(all(r[0] == 0 for r in results),
          f"with Zico both jobs finish (exit statuses {[r[0] for r in results]}; {[r[1] for r in results]})")
    rates = [r[1]["iters_per_s"] for r in results]
    print(f"iterations/s: {rates[0]:.1f} and {rates[1]:.1f}")
    check(status is not None and status["gpus"][0]["zico"] is not None, "tandemd shows its Zico state")
    jobs = status["gpus"][0]["zico"]["jobs"]
    print("jobs:", [{k: j[k] for k in ("learned", "trough_bytes", "peak_bytes", "period_ms", "starts", "delayed_starts")}
                    for j in jobs])
    check(len(jobs) == 2 and all(j["learned"] for j in jobs), "both curves learned")
    check(all(150 << 20 <= j["peak_bytes"] <= 170 << 20 and 30 << 20 <= j["trough_bytes"] <= 40 << 20 for j in jobs),
          "each curve's peak is about 152 MiB and its trough about 32 MiB")
    check(sum(j["delayed_starts"] for j in jobs) > 0, "iteration starts were delayed")
    check(not any(j["unruly"] for j in jobs),
          f"both keep to their permits (starts without one: {[j['unpermitted_starts'] for j in jobs]})")


def lagging(env):
    """What a backward pass frees reaches the GPU when the job's progress thread gives its idle
    pool chunks back: here every 20 ms (TANDEM_SAMPLE_US=80 ms, a busy host's delay made long),
    with a budget of 272 MiB (a margin of 16). The other job, let start beside that backward
    pass, must wait for the memory rather than run out of it: at least 3 runs, both jobs finish
    each, and allocations waited. Waits are seen in a fifth to three quarters of the runs
    (the machine's load decides), so up to 5 more runs are made while none was (3 runs without
    one: once in a CI run; 4 in a row seen once here). Before, a job ran out of
    memory in about 2 runs of 3 with the default budget (and in one CI run of the `zico` case,
    unslowed)."""
    waits = []
    for run in range(8):
        if run >= 3 and sum(waits) > 0:
            break
        results, _ = two_jobs(env, job_settings={"TANDEM_SAMPLE_US": "80000"},
                              TANDEM_ZICO="1", TANDEM_ZICO_BUDGET="272M")
        check(all(r[0] == 0 for r in results),
              f"run {run + 1}: both jobs finish (exit statuses {[r[0] for r in results]}; {[r[1] for r in results]})")
        waits.append(0)
        for name in os.listdir(env.tmp):  # the jobs' statistics files (Env.start), taken once
            if name.startswith("stats-"):
                path = os.path.join(env.tmp, name)
                with open(path) as f:
                    waits[-1] += json.load(f)["memory"].get("zico_memory_waits", 0)
                os.unlink(path)
    print(f"allocations that waited for memory, per run: {waits}")
    check(sum(waits) > 0, "allocations waited for the memory the other job's backward pass freed")


def fake_job(stop):
    """A training client that claims 1 PiB in use and registers anew every 0.4 s."""
    def run(env, status):
        uuid = status["gpus"][0]["uuid"]

        def loop():
            while not stop.is_set():
                s = connect(env.socket)
                kind, reply, fds = ask(s, HELLO, {"role": "training", "gpu": uuid})
                if kind == HELLO_OK:
                    page = mmap.mmap(fds[1], PAGE_BYTES, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
                    struct.pack_into("<QQ", page, 120, 1 << 50, 1 << 50)  # peak_bytes, bytes_in_use
                for fd in fds:
                    os.close(fd)
                stop.wait(0.4)
                s.close()
        threading.Thread(target=loop, daemon=True).start()
    return run


def hostile(env):
    settings = {"shared": False, "TANDEM_ZICO": "1", "TANDEM_ZICO_BUDGET": "240M"}
    results, _ = two_jobs(env, **settings)
    check(all(r[0] == 0 for r in results), f"the two jobs alone finish (exit statuses {[r[0] for r in results]})")
    honest = [r[1]["iters_per_s"] for r in results]
    stop = threading.Event()
    results, status = two_jobs(env, fake_job(stop), **settings)
    stop.set()
    check(all(r[0] == 0 for r in results), f"beside the fake both jobs finish (exit statuses {[r[0] for r in results]})")
    rates = [r[1]["iters_per_s"] for r in results]
    zico_state = status["gpus"][0]["zico"]
    print(f"iterations/s beside the fake: {rates[0]:.1f} and {rates[1]:.1f} (beside each other alone: "
          f"{honest[0]:.1f} and {honest[1]:.1f}); newcomers held the others {zico_state.get('newcomers_held_ms', 0):.0f} ms")
    check(all(r > 0.5 * h for r, h in zip(rates, honest)),
          "each job keeps more than half its rate: the fake's claim and its registrations hold nobody for long")
    check(max(j["peak_bytes"] for j in zico_state["jobs"]) <= 288 << 20, "no claim is taken past the GPU's size")
    check(sum(j["delayed_starts"] for j in zico_state["jobs"]) > 0, "the two jobs are still shifted against each other")


if __name__ == "__main__":
    run_case({"without": without, "zico": zico, "hostile": hostile, "lagging": lagging})
