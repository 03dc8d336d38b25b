#!/usr/bin/env python3
"""Zico end to end (docs/zico.md): two training jobs whose memory peaks together exceed the GPU.

The simulated GPU has 288 MiB for all its processes (SIMGPU_MEM_SHARED=1). Each job holds
32 MiB of weights and allocates 120 MiB of activations per iteration (8 parts before its 8
forward kernels, freed after its 8 backward kernels): 152 MiB at its peak, 304 MiB for both.
Both use tandem's memory pool. The second job starts a second after the first.

  without  tandemd without TANDEM_ZICO: the peaks meet and a job runs out of memory
  zico     TANDEM_ZICO=1 (budget 240 MiB): both jobs finish every iteration; tandemd learned
           both curves and delayed iteration starts; the second job profiled while the first
           waited at its trough
"""
import time

from e2e_util import check, last_json, run_case

GPU = {"SIMGPU_MEM_SHARED": "1", "SIMGPU_MEM_BYTES": str(288 << 20)}
JOB = ["--mem-mb", "32", "--activations-mb", "120", "--compute-kernels", "8", "--kernel-us", "2000",
       "--comm-us", "500", "--gap-us", "2000"]
SECONDS = 4
OUT_OF_MEMORY = 3  # train-sim's exit status when an activation cannot be allocated


def two_jobs(env, **daemon_settings):
    """Runs the two jobs beside tandemd; their exit statuses and last JSON lines, and the status
    tandemd showed while both ran."""
    env.base.update(GPU)
    d = env.daemon("fill", **daemon_settings)
    jobs = [env.start("train-sim", "--seconds", str(SECONDS), *JOB, role="training", TANDEM_MEM_POOL="1")]
    time.sleep(1.0)
    jobs.append(env.start("train-sim", "--seconds", str(SECONDS), *JOB, role="training", TANDEM_MEM_POOL="1"))
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


if __name__ == "__main__":
    run_case({"without": without, "zico": zico})
