#!/usr/bin/env python3
"""Zico for PyTorch (docs/zico.md, "PyTorch"): two unmodified PyTorch training jobs
(examples/pytorch/train.py) on a simulated GPU of 1400 MiB for all processes
(SIMGPU_MEM_SHARED=1). Each job (batch 1024, a 30 ms data-loading pause per step) holds about
140 MiB between steps and about 500 MiB at its peak, as its allocator sees it; on the pool
(TANDEM_MEM_POOL=1, TANDEM_MEM_TORCH_BACKEND=async: PyTorch's stream-ordered backend) it holds
more chunks than that (frees wait for the GPU, small live tensors keep chunks): about 1.1 GiB
when nothing asks for them, 550-670 MiB at its peak and 290-350 MiB between steps when it gives
idle chunks back at once. PyTorch comes from the project's venv; without it the test is skipped
(exit 77).

  without  tandemd without TANDEM_ZICO: a job runs out of memory
  zico     TANDEM_ZICO=1 with a budget of 1000 MiB, which the two peaks (1003 MiB live) do not
           fit in (the other 400 MiB are for the chunks the pools hold beyond their live
           bytes): both jobs run every step and finish (their CUDA graph capture included: its
           allocations take the GPU's memory only when the graph runs, as on a GPU;
           docs/zico.md), tandemd learned both curves and delayed starts, and the timed steps of
           the pair take at least 1.2x less time than those of the two jobs one after the other
           (both warmed up beside the same tandemd; the second paused until the first exited)

Both jobs warm up for 80 steps (4-5 s: a curve is learned once the trough has stayed put for
3 s, and PyTorch's optimizer state appears at the first step), the first while the second waits
at its first allocation, then the second while the first waits for the common start
(TANDEM_ZICO_PROFILE_MS=30000 covers PyTorch's start-up; TANDEM_ZICO_MAX_WAIT_MS=60000 the wait).
"""
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from e2e_util import check, last_json, run_case  # noqa: E402
from torch_e2e import example, require_torch, start  # noqa: E402

GPU = {"SIMGPU_MEM_SHARED": "1", "SIMGPU_MEM_BYTES": str(1400 << 20)}
STEPS = 60
JOB = ["--steps", str(STEPS), "--replays", "0", "--batch", "1024", "--sleep-ms", "30", "--warmup-steps", "80",
       "--log-steps"]
ON_POOL = {"TANDEM_ROLE": "training", "TANDEM_MEM_POOL": "1", "TANDEM_MEM_TORCH_BACKEND": "async",
           "TANDEM_ZICO_MAX_WAIT_MS": "60000"}
ZICO = {"TANDEM_ZICO": "1", "TANDEM_ZICO_BUDGET": "1000M", "TANDEM_ZICO_PROFILE_MS": "30000"}
LEAD_S = 60  # both jobs' warm-up (import, cuBLAS, 80 steps), one after the other, on 2 cores, with room
MIN_RATIO = 1.2


def step_times(out):
    return [json.loads(l)["t"] for l in out.splitlines() if l.startswith('{"step"')]


def jobs(env, pause=None):
    """The two jobs, their timed steps starting together LEAD_S from now (the second's held by
    `pause`, a file, while it exists); and that start."""
    at = time.time() + LEAD_S
    args = [example("train.py"), *JOB, "--start-at", f"{at:.3f}"]
    first = start(env, args, **ON_POOL)
    second = start(env, args + (["--pause-file", pause] if pause else []), **ON_POOL)
    env.started += [first, second]
    return first, second, at


def zico_of(status, pids):
    """tandemd's Zico view in `status` once it holds exactly the jobs `pids`; else None."""
    z = status and status["gpus"] and status["gpus"][0].get("zico")
    return z if z and {j["pid"] for j in z["jobs"]} == set(pids) else None


def zico_view(env, pids):
    return zico_of(env.status(), pids)


def finished(p, name, read=""):
    """Its exit status, step times and timed seconds (`read`: what of its output was read already)."""
    out, err = p.communicate(timeout=240)
    out = read + out
    steps = step_times(out)
    print(f"{name}: exit {p.returncode}, {len(steps)} steps")
    if p.returncode:
        print(err[-6000:])
    return p.returncode, steps, last_json(out).get("train_s") if p.returncode == 0 else None


def without(env):
    env.base.update(GPU)
    d = env.daemon("fill")
    first, second, _ = jobs(env)
    results = [finished(first, "job 1"), finished(second, "job 2")]
    d.terminate()
    d.wait()
    check(any(code != 0 for code, _, _ in results), "without Zico the two jobs do not fit: a job fails")


def zico(env):
    env.base.update(GPU)
    d = env.daemon("fill", **ZICO)
    # One after the other: the second waits (paused, after its warm-up) for the first's exit. Not
    # for its last step: the first then still holds its memory (its capture follows, and a
    # finished job's pooled chunks stay its own until it exits), so the second would start into
    # the first's memory, which is not "one after the other".
    pause = os.path.join(env.tmp, "pause")
    open(pause, "w").close()
    first, second, at = jobs(env, pause)
    a = finished(first, "alone 1")
    os.unlink(pause)
    resumed = time.time()
    b = finished(second, "alone 2")
    check(a[0] == 0 and b[0] == 0 and len(a[1]) == len(b[1]) == STEPS, "one after the other, both jobs finish")
    # The first's timed part (from its start, late or not), then the second's from its release.
    sequential = a[2] + (b[1][-1] - resumed)
    # Side by side.
    first, second, at = jobs(env)
    views = []  # (when, tandemd's Zico view)
    while first.poll() is None or second.poll() is None:
        v = zico_view(env, (first.pid, second.pid))
        if v:
            views.append((time.time(), v))
        time.sleep(0.5)
    a, b = finished(first, "job 1"), finished(second, "job 2")
    d.terminate()
    d.wait()
    check(a[0] == 0 and b[0] == 0, "with Zico both jobs run without running out of memory and finish "
                                   "(their graph capture included)")
    check(len(a[1]) == len(b[1]) == STEPS, f"every step ran ({len(a[1])} and {len(b[1])} of {STEPS})")
    concurrent = max(a[1][-1], b[1][-1]) - at
    # The view while both ran their timed steps: its curves are those of the last 3 s, and after
    # the steps (graph capture, exit) they flatten.
    during = [v for t, v in views if t <= min(a[1][-1], b[1][-1])]
    view = during[-1] if during else None
    check(view is not None, "tandemd showed both jobs' Zico state while they ran their steps")
    print("jobs:", [{k: j[k] for k in ("learned", "unshaped", "trough_bytes", "peak_bytes", "period_ms", "active_ms",
                                       "last_shift_ms", "starts", "delayed_starts", "unpermitted_starts")}
                    for j in view["jobs"]],
          "newcomers_held_ms:", view["newcomers_held_ms"])
    check(all(j["learned"] for j in view["jobs"]), "both curves learned from what PyTorch's allocator holds")
    check(all(j["peak_bytes"] > 2 * j["trough_bytes"] for j in view["jobs"]),
          "each curve rises well above its trough (activations dominate the peak)")
    check(sum(j["delayed_starts"] for j in view["jobs"]) > 0, "iteration starts were delayed")
    ratio = sequential / concurrent
    print(f"timed steps: one after the other {sequential:.2f} s, side by side {concurrent:.2f} s: {ratio:.2f}x")
    check(ratio >= MIN_RATIO, f"side by side at least {MIN_RATIO}x faster than one after the other ({ratio:.2f}x)")


def unlearned(env):
    """A job tandemd time-shifts but has no curve for (its profiling over: here at once, with
    TANDEM_ZICO_PROFILE_MS=0) publishes no trough and never waits, but still gives its idle chunks
    back at once: the other job's forward pass needs them. Before the slot's zico_shared such a
    job kept what its pool took (about 1.1 GiB), and a job beside it ran out of memory."""
    env.base.update(SIMGPU_MEM_SHARED="1", SIMGPU_MEM_BYTES=str(4000 << 20))  # room: only what each holds is looked at
    d = env.daemon("fill", TANDEM_ZICO="1", TANDEM_ZICO_BUDGET="1000M", TANDEM_ZICO_PROFILE_MS="0")
    first, second, _ = jobs(env)
    pids = {first.pid, second.pid}
    held = {}  # pid -> the most its pool held while both ran and its curve was not learned
    both_learned = False
    deadline = time.time() + LEAD_S
    while time.time() < deadline and first.poll() is None and second.poll() is None and not both_learned:
        s = env.status()
        z = zico_of(s, pids)
        if z:
            pool = {sl["pid"]: sl.get("pool_bytes", 0) for sl in s["gpus"][0]["slots"]}
            for j in z["jobs"]:
                if not j["learned"] and j["iterations"] == 0 and pool.get(j["pid"], 0) > 0:
                    held[j["pid"]] = max(held.get(j["pid"], 0), pool[j["pid"]])
            both_learned = all(j["learned"] for j in z["jobs"])
        time.sleep(0.1)
    for p in (first, second):
        p.kill()
        p.wait()
    d.terminate()
    d.wait()
    print("most held while unlearned (MiB):", {pid: b >> 20 for pid, b in held.items()})
    check(held and max(held.values()) > (200 << 20), "a job ran steps beside the other before its curve was learned")
    check(max(held.values()) <= (800 << 20), "it gave its idle chunks back at once: its pool held at most 800 MiB "
                                             "(about 1.1 GiB when it keeps them)")


if __name__ == "__main__":
    require_torch()
    run_case({"without": without, "zico": zico, "unlearned": unlearned})
