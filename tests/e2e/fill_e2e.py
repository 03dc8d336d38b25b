#!/usr/bin/env python3
"""End-to-end checks of the fill policy on the simulated GPU, as ratios measured in one run.

usage: fill_e2e.py BUILD_DIR CASE
  retention       training under tandem keeps >= 0.95 of Exclusive, Co-Exec is clearly lower,
                  and the filler makes progress (best of up to 3 interleaved rounds)
  daemon-killed   tandemd is killed mid-run: training and the filler both finish normally
  daemon-stopped  tandemd is stopped (SIGSTOP) for a second: the filler fails open and keeps
                  running, and both processes keep their one registration when it resumes
  daemon-restarted  tandemd is killed and started again (as a supervisor would) while training and
                  the filler run: both re-register, and from then on the new daemon sees training's
                  iterations as the first one did (busy and bubble lengths) and training keeps its
                  share of Exclusive
  threads         a batch filler with 8 host threads, each launching 1 ms kernels on its own
                  stream, beside training, in several runs (grids that fill the GPU and grids
                  that let the filler's kernels overlap): every run finishes in bounded time and
                  training keeps >= 0.95 of Exclusive (its best run per grid)
  communication   the daemon sees training's collectives (markers behind NCCL kernels) and
                  holds the filler during them (fill phase "communication")
  communication-queued  training in data parallelism's order (train-sim --optimizer-us: the
                  optimizer kernel queued behind the collective with an event, as DDP does) under
                  MPS: with TANDEM_FILL_COMM=1 tandemd grants the filler while the collective
                  runs (what waits behind it is not running work), with TANDEM_FILL_COMM=0 it
                  holds the filler then (fill phase "communication")
  client-killed   the filler is killed mid-run: its slot and tokens are reclaimed, training
                  goes on, and a new filler registers and makes progress
  service-time    an online request's latency includes a cold start (a model loaded before
                  it begins); the admission's estimate of what a bubble must hold is its
                  service time from admission, not that latency, so requests still fit bubbles
  sample-overflow a gated filler whose own environment says TANDEM_SAMPLE_US=99999999999999999999
                  (nanoseconds beyond 64 bits) warns once, keeps the default period, and fails
                  open while tandemd is stopped: it finishes its run with tandemd never ticking
                  again (a wrapped period once made it wait for ever)
"""
import json
import signal
import subprocess
import sys
import time

from e2e_util import Env, check, finish, slots_by_pid, stats_file, wait_for


def retention_round(env, seconds):
    """One round: training alone, beside the filler (Co-Exec), beside it under tandem."""
    alone = finish(env.start("train-sim", "--seconds", seconds))["iters_per_s"]
    a, b = env.start("train-sim", "--seconds", seconds), env.start("infer-sim", "--seconds", seconds)
    coexec = finish(a)["iters_per_s"]
    finish(b)
    d = env.daemon()
    a = env.start("train-sim", "--seconds", seconds, role="training")
    b = env.start("infer-sim", "--seconds", seconds, role="batch-inference")
    tandem = finish(a)["iters_per_s"]
    filler = finish(b)
    d.terminate()
    d.wait()
    return alone, coexec, tandem, filler["requests"]


def retention(env, seconds="3", rounds=3):
    # Noise from other work on the machine only ever lowers a throughput, so Exclusive and
    # tandem are judged by their best of the rounds run so far, and more rounds are run only
    # while the verdict is not yet clear. A tandem that does not gate stays near Co-Exec (about
    # 0.75) in every round and fails. Co-Exec only has to show, in some round, that the filler
    # does slow training when nothing gates it.
    best = {"alone": 0.0, "coexec": float("inf"), "tandem": 0.0}
    requests = 0
    for r in range(1, rounds + 1):
        alone, coexec, tandem, n = retention_round(env, seconds)
        print(f"round {r}: training it/s exclusive {alone:.2f}, co-exec {coexec:.2f} ({coexec / alone:.3f}), "
              f"tandem {tandem:.2f} ({tandem / alone:.3f}); filler {n} requests")
        best = {"alone": max(best["alone"], alone), "coexec": min(best["coexec"], coexec),
                "tandem": max(best["tandem"], tandem)}
        requests = max(requests, n)
        if best["tandem"] / best["alone"] >= 0.95 and best["coexec"] / best["alone"] <= 0.90:
            break
    kept, coexec_kept = best["tandem"] / best["alone"], best["coexec"] / best["alone"]
    print(f"after {r} round(s): best tandem {kept:.3f}, lowest co-exec {coexec_kept:.3f} of best Exclusive")
    check(kept >= 0.95, f"training under tandem keeps {kept:.3f} >= 0.95 of Exclusive")
    check(coexec_kept <= 0.90, f"Co-Exec is measurably lower ({coexec_kept:.3f} <= 0.90)")
    check(requests >= 20, f"the filler made progress ({requests} requests)")


def daemon_killed(env):
    d = env.daemon()
    a = env.start("train-sim", "--seconds", "3", role="training")
    b = env.start("infer-sim", "--seconds", "3", role="batch-inference")
    st = env.registered(a, b)
    check(st is not None and len(st["gpus"]) == 1 and len(st["gpus"][0]["slots"]) == 2, "both processes registered")
    d.kill()
    d.wait()
    t, i = finish(a), finish(b)  # fail open: neither hangs
    check(t["iterations"] > 0 and i["requests"] > 0, "training and the filler finished after the daemon died")
    # And they come back when it returns: a new daemon, new clients register with it.
    d = env.daemon()
    a = env.start("train-sim", "--seconds", "1.5", role="training")
    st = env.registered(a)
    finish(a)
    d.terminate()
    d.wait()
    check(st is not None, "a restarted daemon is used")


def detector_view(env):
    """(mean bubble ms, mean busy ms, bubbles learned) of the daemon's only GPU."""
    st = env.status()
    g = st["gpus"][0] if st and st["gpus"] else None
    return (g["mean_bubble_ms"], g["mean_busy_ms"], g["bubbles"]) if g else (0.0, 0.0, 0)


def registered_slots(env):
    st = env.status()
    return len(st["gpus"][0]["slots"]) if st and st["gpus"] else 0


def iters_per_s_after(report_lines, after_s):
    """Training's iterations per second from its first report at or after `after_s` to its last."""
    lines = [l for l in report_lines if "iter" in l and l["elapsed_s"] >= after_s]
    first, last = lines[0], lines[-1]
    return (last["iter"] - first["iter"]) / (last["elapsed_s"] - first["elapsed_s"])


def restarted_round(env):
    """Exclusive, then training and the filler under a daemon that is killed and restarted at
    2.5 s; training's throughput from 1.5 s after the restart (re-registration takes up to 1 s)."""
    alone = finish(env.start("train-sim", "--seconds", "3"))["iters_per_s"]
    d = env.daemon()
    started = time.monotonic()
    a = env.start("train-sim", "--seconds", "7", "--report-every", "5", role="training")
    b = env.start("infer-sim", "--seconds", "8", role="batch-inference")  # beside training to its end
    time.sleep(2.5)
    before = detector_view(env)
    d.kill()
    d.wait()
    restart_s = time.monotonic() - started
    d = env.daemon()
    registered = wait_for(lambda: registered_slots(env) == 2)
    time.sleep(2.5)
    after = detector_view(env)
    out, err = a.communicate(timeout=60)
    if a.returncode != 0:
        raise SystemExit(f"FAIL: train-sim exited with {a.returncode}: {err[-2000:]}")
    kept = iters_per_s_after([json.loads(l) for l in out.splitlines() if l.startswith("{")], restart_s + 1.5) / alone
    filler = finish(b)
    d.terminate()
    d.wait()
    print(f"detector before the restart: bubble {before[0]:.1f} ms, busy {before[1]:.1f} ms; after: bubble "
          f"{after[0]:.1f} ms, busy {after[1]:.1f} ms ({after[2]} bubbles); training after the restart "
          f"{kept:.3f} of Exclusive; filler {filler['requests']} requests")
    return before, after, kept, registered, stats_file(env, a.pid), stats_file(env, b.pid)


def daemon_restarted(env, rounds=2):
    # Training's share is judged by the best round (noise from other work only lowers it); the
    # detector's view by that round's figures. Without the fix a restarted daemon saw training's
    # markers as never pending: bubbles of ~46 ms and ~1 ms busy, training at ~0.73.
    best = None
    for _ in range(rounds):
        result = restarted_round(env)
        if best is None or result[2] > best[2]:
            best = result
        if best[2] >= 0.95:
            break
    before, after, kept, registered, train, filler = best
    check(registered and train["daemon"]["links"] == 2 and filler["daemon"]["links"] == 2,
          f"both re-registered with the new daemon (links: training {train['daemon']['links']}, "
          f"filler {filler['daemon']['links']})")
    check(after[2] >= 10 and after[1] >= 0.5 * before[1] and after[0] <= 2 * before[0],
          f"the new daemon sees training busy {after[1]:.1f} ms (first daemon {before[1]:.1f}) and bubbles of "
          f"{after[0]:.1f} ms (first daemon {before[0]:.1f})")
    check(kept >= 0.95, f"training after the restart keeps {kept:.3f} >= 0.95 of Exclusive")


def threads_run(env, blocks):
    """Training beside an 8-thread filler under tandem: training's it/s, or None if a process hung."""
    d = env.daemon()
    a = env.start("train-sim", "--seconds", "3", role="training")
    b = env.start("infer-sim", "--seconds", "3", "--threads", "8", "--kernel-us", "1000", "--blocks", str(blocks),
                  role="batch-inference")
    try:
        result = finish(a, timeout=30)["iters_per_s"], finish(b, timeout=10)["requests"]
    except subprocess.TimeoutExpired:
        st = env.status()
        print(f"hung: {json.dumps(st['gpus'][0] if st and st['gpus'] else st)[:1500]}")
        for p in (a, b):
            p.kill()
            p.wait()
        result = None
    d.terminate()
    d.wait()
    return result


def threads(env, runs=3):
    # 132 blocks fill the simulated GPU (the filler's kernels run one at a time); 16 let its
    # streams' kernels overlap, so several of them finish together. Without the fixes the
    # threads all passed the gate on one positive balance and the daemon took work on other
    # streams for done (training 0.73-0.86), and two of the filler's kernels finishing together
    # could leave the simulated GPU owned by a filler held at its gate (a hang, 1 run in 4-10).
    alone = max(finish(env.start("train-sim", "--seconds", "3"))["iters_per_s"] for _ in range(2))
    for blocks in (132, 16):
        best = 0.0
        for r in range(runs):
            result = threads_run(env, blocks)
            check(result is not None, f"run {r + 1} with {blocks}-block kernels finished")
            kept, requests = result[0] / alone, result[1]
            print(f"  training {kept:.3f} of Exclusive, filler {requests} requests")
            best = max(best, kept)
        check(best >= 0.95, f"beside the 8-thread filler ({blocks}-block kernels) training keeps {best:.3f} >= 0.95 "
              f"of Exclusive (best of {runs} runs)")


def daemon_stopped(env):
    d = env.daemon()
    a = env.start("train-sim", "--seconds", "4", role="training")
    b = env.start("infer-sim", "--seconds", "4", role="batch-inference")
    st = env.registered(a, b)
    check(st is not None and len(st["gpus"][0]["slots"]) == 2, "both processes registered")
    d.send_signal(signal.SIGSTOP)  # hung, not gone: its socket stays open
    time.sleep(1.0)
    d.send_signal(signal.SIGCONT)
    st = env.registered(a, b)
    check(st is not None and len(st["gpus"][0]["slots"]) == 2, "both registered after the daemon resumed")
    t, i = finish(a), finish(b)
    d.terminate()
    d.wait()
    train, filler = stats_file(env, a.pid), stats_file(env, b.pid)
    check(t["iterations"] > 0 and i["requests"] > 0, "training and the filler finished")
    check(filler["gate"]["fail_open"] >= 1, f"the filler failed open while the daemon was stopped "
          f"({filler['gate']['fail_open']} gate waits ended by the stale heartbeat)")
    check(train["daemon"]["links"] == 1 and filler["daemon"]["links"] == 1,
          f"no re-registration: links training {train['daemon']['links']}, filler {filler['daemon']['links']}")


def sample_overflow(env):
    d = env.daemon()
    a = env.start("train-sim", "--seconds", "30", role="training")
    b = env.start("infer-sim", "--seconds", "3", role="batch-inference", TANDEM_SAMPLE_US="99999999999999999999")
    try:
        gated = env.status_when(lambda s: a.pid in slots_by_pid(s) and
                                slots_by_pid(s).get(b.pid, {}).get("gate") == "tokens", (a, b))
        check(gated is not None, "the filler registered and is gated beside training")
        d.send_signal(signal.SIGSTOP)  # hung, not gone: no tick, no wake-up, the socket open
        try:
            out, err = b.communicate(timeout=40)  # its run is 3 s; it fails open after 100 ms
        except subprocess.TimeoutExpired:
            raise SystemExit("FAIL: the filler hung at its gate with tandemd stopped (40 s)")
    finally:
        d.send_signal(signal.SIGCONT)
        a.kill()
        d.terminate()
        d.wait()
    check(b.returncode == 0, f"the filler finished its run while tandemd was stopped ({b.returncode}) {err[-300:]}")
    warnings = [l for l in err.splitlines() if "TANDEM_SAMPLE_US" in l]
    check(len(warnings) == 1 and "'99999999999999999999'" in warnings[0] and "using '1000'" in warnings[0],
          f"one warning naming the variable, the value and the default: {warnings}")
    filler = stats_file(env, b.pid)
    check(filler["gate"]["fail_open"] >= 1, f"it failed open on the stale heartbeat ({filler['gate']['fail_open']} times)")


def communication(env):
    d = env.daemon()
    a = env.start("train-sim", "--seconds", "3", role="training")
    b = env.start("infer-sim", "--seconds", "3", role="batch-inference")
    env.registered(a, b)
    phases, communicating = set(), 0
    for _ in range(60):  # the stand-in collective is 6 ms of each 40 ms iteration
        st = env.status()
        if st and st["gpus"]:
            phases.add(st["gpus"][0]["fill_phase"])
            communicating += st["gpus"][0]["communicating"]
        time.sleep(0.02)
    filler = next(s for s in st["gpus"][0]["slots"] if s["pid"] == b.pid)
    t, i = finish(a), finish(b)
    d.terminate()
    d.wait()
    check(communicating > 0 and "communication" in phases,
          f"collectives seen in {communicating} of 60 samples; fill phases seen: {sorted(phases)}")
    check(t["iterations"] > 0 and i["requests"] > 0, "training and the filler both ran")
    # infer-sim reports its requests through the client API; a batch filler's requests are not
    # online ones: never admitted into bubbles one by one, never counted open.
    check(i["request_api"] and filler["admission_waits"] == 0 and filler["requests_open"] == 0,
          f"the filler's reported requests were ignored (admission waits {filler['admission_waits']}, "
          f"open {filler['requests_open']})")


def collective_phases(env, comm):
    """The fill phases tandemd showed while train-sim's collective ran, TANDEM_FILL_COMM=comm."""
    sim = {"SIMGPU_SHARING": "mps"}
    # 4 x 4 ms of compute, a collective of 10 ms with a 3 ms optimizer kernel behind it, 6 ms
    # of data loading: the collective is a third of each iteration.
    train = ["--seconds", "3", "--compute-kernels", "4", "--kernel-us", "4000", "--comm-us", "10000",
             "--optimizer-us", "3000", "--gap-us", "6000"]
    d = env.daemon(TANDEM_FILL_COMM=comm)
    a = env.start("train-sim", *train, role="training", **sim)
    b = env.start("infer-sim", "--seconds", "3", role="batch-inference", **sim)
    env.registered(a, b)
    phases = []
    while a.poll() is None:
        st = env.status()
        if st and st["gpus"] and st["gpus"][0]["communicating"]:
            phases.append(st["gpus"][0]["fill_phase"])
        time.sleep(0.01)
    t, i = finish(a), finish(b)
    d.terminate()
    d.wait()
    check(t["iterations"] > 0 and i["requests"] > 0, f"TANDEM_FILL_COMM={comm}: training and the filler both ran")
    return phases


def communication_queued(env):
    granting = {"incremental", "stable"}
    filled, held = collective_phases(env, "1"), collective_phases(env, "0")
    print(f"TANDEM_FILL_COMM=1: {len(filled)} samples during a collective, phases "
          f"{ {p: filled.count(p) for p in set(filled)} }; TANDEM_FILL_COMM=0: {len(held)}, "
          f"{ {p: held.count(p) for p in set(held)} }")
    check(len(filled) >= 10 and len(held) >= 10, "tandemd saw the collectives in flight")
    # A collective counts from its launch, queued behind the compute (as DDP's all-reduces are
    # during the backward pass): while the compute runs the phase is "closed". The collective
    # itself runs for about a third of those samples. Without telling queued work from running
    # work every sample is "closed": the optimizer's pending marker keeps the GPU busy.
    share = sum(p in granting for p in filled) / len(filled)
    check(share >= 0.2, f"TANDEM_FILL_COMM=1: tandemd granted in {share:.2f} >= 0.2 of them")
    comm = held.count("communication") / len(held)
    check(comm >= 0.2 and not granting & set(held),
          f"TANDEM_FILL_COMM=0: it held the filler instead (\"communication\" in {comm:.2f} >= 0.2, never granting)")


def client_killed(env):
    d = env.daemon()
    a = env.start("train-sim", "--seconds", "4", role="training")
    b = env.start("infer-sim", "--seconds", "10", role="batch-inference")
    st = env.registered(a, b)
    check(st and len(st["gpus"][0]["slots"]) == 2, "training and filler registered")
    b.send_signal(signal.SIGKILL)
    b.wait()
    st = env.status_when(lambda s: set(slots_by_pid(s)) == {a.pid}, (a,), seconds=10)
    check(st is not None, "the killed filler's slot (and its tokens) were reclaimed")
    c = env.start("infer-sim", "--seconds", "2", role="batch-inference")
    filler = finish(c)
    t = finish(a)
    d.terminate()
    d.wait()
    check(filler["requests"] > 0 and t["iterations"] > 0, f"a new filler ran ({filler['requests']} requests) beside training")


def service_time(env):
    d = env.daemon()
    a = env.start("train-sim", "--seconds", "4", role="training")
    # The model is released 30 ms after each request, so most requests load 128 MiB first.
    b = env.start("infer-sim", "--seconds", "3", "--rate", "10", "--models", "1", "--model-mb", "128",
                  "--idle-ms", "30", "--mem-mb", "0", role="inference", TANDEM_SLO_MS="200")
    # While it runs (a finished process's slot is gone), once it has served some requests.
    st = env.status_when(lambda s: slots_by_pid(s).get(b.pid, {}).get("requests", 0) >= 10, (a, b))
    i = finish(b)
    check(st is not None, "the online process registered and served requests")
    online = slots_by_pid(st)[b.pid]
    refusals = st["gpus"][0]["admission_refused"]
    finish(a)
    d.terminate()
    d.wait()
    check(online["request_ms"] < 20,
          f"the admission's estimate is the service time ({online['request_ms']:.1f} ms), not the latency")
    # (At 15 requests/s on a loaded machine, latencies of 200 ms queued requests back to back,
    # leaving the model no idle 30 ms: 3 cold starts in a CI run.)
    check(i["cold_starts"] >= 3 and i["p50_ms"] >= 30,
          f"requests waited for cold starts ({i['cold_starts']}, latency p50 {i['p50_ms']:.1f} ms)")
    check(not any("longer than the longest bubble" in r for r in refusals), f"no refusal for length ({refusals})")


def main():
    build, case = sys.argv[1], sys.argv[2]
    env = Env(build)
    {"retention": retention, "daemon-killed": daemon_killed, "daemon-stopped": daemon_stopped,
     "sample-overflow": sample_overflow,
     "daemon-restarted": daemon_restarted, "threads": threads,
     "communication": communication,
     "communication-queued": communication_queued,
     "client-killed": client_killed, "service-time": service_time}[case](env)
    print(f"fill e2e {case}: ok")


if __name__ == "__main__":
    main()
