#!/usr/bin/env python3
"""End-to-end checks of policy slo (inference first) on the simulated GPU, ratios in one run.

usage: slo_e2e.py BUILD_DIR CASE
  latency      online inference (Poisson arrivals at half its capacity) beside training: under
               tandem its p99 stays within 1.2 x Exclusive while Co-Exec's is clearly worse, and
               training keeps more than 0.3 of Exclusive (best of up to 3 interleaved rounds)
  step         training starts beside running inference (a load step): the controller lowers
               training's duty cycle and the measured latency is back at the target within
               5 control periods
  transparent  without the client API tandem sees requests as the launches between
               synchronizations and publishes their latency; none stays open
  daemon-killed  tandemd dies while training is held back: both processes finish
  realistic-mps  the issue's workload (20 x 1 ms kernels on the whole GPU, a 6 ms NCCL-named
               all-reduce, 4 ms host work; inference 4 x 1 ms on half the GPU at 100 requests/s)
               under MPS with training on half the SMs: p99 within 1.10 x Exclusive, training
               keeps at least 0.5, tandemd saw the split (best of up to 3 rounds)
  realistic-timeslice  the same under time slicing (collectives not held: holding them,
               TANDEM_JOB_LOCAL=1, measured no better here, docs/slo.md): p99 within 1.35 x
               Exclusive, training at least 0.3
  floor        a target below what the policy can reach: status says so and names training's
               collective; with TANDEM_JOB_LOCAL=1 the collective is held and leaves the floor
  fractional   TANDEM_SLO_MS=23.24 is a target of 23.24 ms (not a warning and 100 ms): in the
               process's row of `tandemctl status --json` and in the controller's history;
               tandemd takes TANDEM_SLO_PERIOD_MS with a unit (0.1s) the same way
  hostile-holds  a hostile online inference client (the socket protocol and its own page, no
               library) beside training: one request opened and never touched stops holding
               training after 4x its target; one kept open for ever, refreshed, is a busy
               server's: tandemd lifts the hold and training keeps launching (it made none)
"""
import mmap
import struct
import sys
import threading
import time

from e2e_util import PAGE_BYTES, Env, check, finish, slots_by_pid

# Training: 100 kernels of 200 us (20 ms compute), a 0.5 ms collective, 11.5 ms of data
# loading. The simulated GPU switches processes only between kernels, and tandem never holds a
# collective back (its peers would stall), so a long stand-in collective would delay requests
# by its whole length; a real GPU preempts at its time slice.
TRAIN = ["--kernel-us", "200", "--compute-kernels", "100", "--comm-us", "500", "--gap-us", "11500"]
# Inference: requests of 4 kernels of 1 ms; latency targets are whole milliseconds.
INFER = ["--kernel-us", "1000"]
WARMUP_S = 1.5  # requests of the first seconds are left out: the start is a load step of its own


def capacity(env):
    """Requests/s the simulated GPU serves infer-sim alone, closed loop."""
    return finish(env.start("infer-sim", "--seconds", "1.5", "--closed-loop", *INFER))["throughput_rps"]


def target_ms(exclusive):
    """The target an operator would set: Exclusive's p99 plus 15%, in whole milliseconds."""
    return max(1, round(1.15 * exclusive["p99_ms"]))


def infer_args(rate, seconds, *extra):
    return ["--seconds", str(seconds), "--rate", f"{rate:.1f}", "--warmup-seconds", str(WARMUP_S), *INFER, *extra]


def latency_round(env, rate, seconds):
    ex_train = finish(env.start("train-sim", "--seconds", "3", *TRAIN))["iters_per_s"]
    ex_infer = finish(env.start("infer-sim", *infer_args(rate, seconds)))
    a, b = env.start("train-sim", "--seconds", str(seconds), *TRAIN), env.start("infer-sim", *infer_args(rate, seconds))
    co_train, co_infer = finish(a)["iters_per_s"], finish(b)
    slo_ms = target_ms(ex_infer)
    d = env.daemon("slo")
    a = env.start("train-sim", "--seconds", str(seconds), *TRAIN, role="training")
    time.sleep(0.3)
    b = env.start("infer-sim", *infer_args(rate, seconds - 0.3), role="inference", TANDEM_SLO_MS=str(slo_ms))
    tandem_infer = finish(b)
    tandem_train = finish(a)["iters_per_s"]
    d.terminate()
    d.wait()
    return {"ex_p99": ex_infer["p99_ms"], "co_p99": co_infer["p99_ms"], "tandem_p99": tandem_infer["p99_ms"],
            "co_train": co_train / ex_train, "tandem_train": tandem_train / ex_train, "slo_ms": slo_ms}


def latency(env, seconds=6, rounds=3):
    rate = 0.5 * capacity(env)
    print(f"inference at {rate:.0f} requests/s (half of its capacity)")
    best = None
    for r in range(1, rounds + 1):
        m = latency_round(env, rate, seconds)
        m["p99_ratio"], m["co_ratio"] = m["tandem_p99"] / m["ex_p99"], m["co_p99"] / m["ex_p99"]
        print(f"round {r}: p99 exclusive {m['ex_p99']:.2f} ms, co-exec {m['co_p99']:.2f} ({m['co_ratio']:.2f}x), "
              f"tandem {m['tandem_p99']:.2f} ({m['p99_ratio']:.2f}x, target {m['slo_ms']} ms); training "
              f"co-exec {m['co_train']:.2f}, tandem {m['tandem_train']:.2f} of Exclusive")
        # Noise on this machine only ever worsens a latency or a throughput: a round that shows
        # both held is the verdict.
        if best is None or (m["p99_ratio"] <= 1.2 and m["tandem_train"] > 0.3) or m["p99_ratio"] < best["p99_ratio"]:
            best = m
        if best["p99_ratio"] <= 1.2 and best["tandem_train"] > 0.3 and best["co_ratio"] >= 1.5:
            break
    check(best["p99_ratio"] <= 1.2, f"inference p99 under tandem is {best['p99_ratio']:.2f} <= 1.2 x Exclusive")
    check(best["co_ratio"] >= 1.5, f"Co-Exec's p99 is clearly worse ({best['co_ratio']:.2f} >= 1.5 x Exclusive)")
    check(best["tandem_train"] > 0.3, f"training keeps {best['tandem_train']:.2f} > 0.3 of Exclusive")


def step(env):
    rate = 0.5 * capacity(env)
    ex = finish(env.start("infer-sim", *infer_args(rate, 3)))
    slo_ms = target_ms(ex)
    d = env.daemon("slo")
    started = time.monotonic()
    b = env.start("infer-sim", *infer_args(rate, 7), role="inference", TANDEM_SLO_MS=str(slo_ms))
    time.sleep(2.0)
    step_at = time.monotonic() - started
    a = env.start("train-sim", "--seconds", "5", *TRAIN, role="training")
    finish(b)
    st = env.status()
    finish(a)
    d.terminate()
    d.wait()
    history = st["gpus"][0]["slo"]["history"]
    after = [h for h in history if h["t_s"] >= step_at and h["samples"] > 0]
    print("after the step (latency ms / duty): " + " ".join(f"{h['latency_ms']:.1f}/{h['duty']:.2f}" for h in after))
    over = next((i for i, h in enumerate(after) if h["latency_ms"] > h["target_ms"]), None)
    check(over is not None, f"the step was felt: a control period over the {slo_ms} ms target after training started")
    back = next((i for i in range(over + 1, len(after)) if after[i]["latency_ms"] <= 1.05 * after[i]["target_ms"]), None)
    check(back is not None and back - over <= 5,
          f"latency back at the target {'never' if back is None else f'{back - over} control periods'} after the step (<= 5)")
    check(min(h["duty"] for h in after) < 1.0, "the controller lowered training's duty cycle")


def transparent(env):
    d = env.daemon("slo")
    b = env.start("infer-sim", "--seconds", "3", "--closed-loop", "--transparent", role="inference")
    # Every control interval that saw requests, read while the process runs: one interval's p99
    # is about its slowest request, which a loaded machine's hiccup alone can triple; requests
    # merged across synchronizations would raise every interval's.
    seen = []
    while b.poll() is None:
        slot = slots_by_pid(env.status() or {"gpus": []}).get(b.pid, {})
        if slot.get("latency_samples", 0) > 10:
            seen.append(slot)
        time.sleep(0.1)
    out = finish(b)
    d.terminate()
    d.wait()
    check(len(seen) >= 3, f"tandemd saw the process's requests ({len(seen)} readings of an interval with requests)")
    gpu_ms = out["gpu_ms_per_request"]
    p99s = sorted(s["latency_ms"] for s in seen)
    median = p99s[len(p99s) // 2]
    check(out["request_api"] is False, "infer-sim did not use the client API")
    check(min(s["latency_samples"] for s in seen) > 10, "requests seen transparently in every reading")
    check(gpu_ms * 0.8 <= median <= gpu_ms * 3,
          f"their published p99 (median of {len(p99s)} intervals {median:.2f} ms, range {p99s[0]:.2f}-{p99s[-1]:.2f}) "
          f"matches a request's {gpu_ms:.1f} ms of GPU work")
    check(all(s["requests_open"] <= 1 and s["slo_ms"] == 100 for s in seen), "at most the current request open; the default target")


def daemon_killed(env):
    rate = 0.5 * capacity(env)
    d = env.daemon("slo")
    a = env.start("train-sim", "--seconds", "3", *TRAIN, role="training")
    b = env.start("infer-sim", *infer_args(rate, 3), role="inference", TANDEM_SLO_MS="5")
    st = env.status_when(lambda s: bool(s["gpus"] and (s["gpus"][0]["slo"] or {}).get("active")), (a, b))
    check(st is not None, "online inference active, training gated")
    d.kill()
    d.wait()
    t, i = finish(a), finish(b)
    check(t["iterations"] > 0 and i["requests"] > 0, "training and inference finished after the daemon died")


# The workload (scripts/bench_slo.py prints the same with Co-Exec beside it).
REAL_TRAIN = ["--compute-kernels", "20", "--kernel-us", "1000", "--comm-us", "6000", "--gap-us", "4000"]
REAL_INFER = ["--kernels", "4", "--kernel-us", "1000", "--blocks", "66", "--rate", "100"]


def realistic_round(env, sharing, ratio, seconds, **settings):
    sim = {"SIMGPU_SHARING": sharing}
    infer = ["--seconds", str(seconds), "--warmup-seconds", str(WARMUP_S), *REAL_INFER]
    ex_train = finish(env.start("train-sim", "--seconds", str(seconds), *REAL_TRAIN, **sim))["iters_per_s"]
    ex = finish(env.start("infer-sim", *infer, **sim))
    slo_ms = max(1, int(ratio * ex["p99_ms"]))
    d = env.daemon("slo")
    a = env.start("train-sim", "--seconds", str(seconds), *REAL_TRAIN, role="training", **sim, **settings)
    time.sleep(0.2)
    b = env.start("infer-sim", *infer, role="inference", TANDEM_SLO_MS=str(slo_ms), **sim)
    time.sleep(seconds / 2)
    st = env.status()
    t_infer, t_train = finish(b), finish(a)["iters_per_s"]
    d.terminate()
    d.wait()
    slo = st["gpus"][0]["slo"] if st else {}
    return {"p99_ratio": t_infer["p99_ms"] / ex["p99_ms"], "train": t_train / ex_train, "slo_ms": slo_ms,
            "ex_p99": ex["p99_ms"], "p99": t_infer["p99_ms"], "slo": slo}


def realistic(env, sharing, p99_bound, train_bound, ratio, rounds=5, **settings):
    best, trained = None, []
    for r in range(1, rounds + 1):
        m = realistic_round(env, sharing, ratio, 6, **settings)
        print(f"round {r} ({sharing}): p99 exclusive {m['ex_p99']:.2f} ms, tandem {m['p99']:.2f} ({m['p99_ratio']:.2f}x, "
              f"target {m['slo_ms']} ms), training {m['train']:.2f} of Exclusive; spatial {m['slo'].get('spatial')}, "
              f"collectives held {m['slo'].get('collectives_held')}, floor {m['slo'].get('floor_ms', 0):.2f} ms")
        # A request is 4 ms of GPU work at 0.4 load: Exclusive's p99 is 12-16 ms. Far above, the
        # machine's load spoiled the baseline, and a ratio to it would pass anything.
        if m["ex_p99"] > 30:
            print(f"round {r}: Exclusive's p99 {m['ex_p99']:.1f} ms > 30 ms, the machine is too loaded: not counted")
            continue
        trained.append(m["train"])
        held = m["p99_ratio"] <= p99_bound and m["train"] >= train_bound
        if best is None or held or m["p99_ratio"] < best["p99_ratio"]:
            best = m
        if held:
            break
    check(best is not None, "a round with a sane Exclusive baseline")
    best["trained"] = trained  # every counted round's training share
    return best


def realistic_mps(env):
    m = realistic(env, "mps", 1.10, 0.5, 1.1, TANDEM_SLO_TRAINING_SMS="50")
    check(m["slo"].get("spatial") is True, "tandemd sees training on part of the SMs (MPS split)")
    check(m["p99_ratio"] <= 1.10, f"inference p99 under tandem is {m['p99_ratio']:.2f} <= 1.10 x Exclusive")
    check(m["train"] >= 0.5, f"training keeps {m['train']:.2f} >= 0.5 of Exclusive")


def realistic_timeslice(env):
    m = realistic(env, "timeslice", 1.35, 0.3, 1.2)
    check(m["slo"].get("collectives_held") is False, "collectives are not held (TANDEM_JOB_LOCAL unset)")
    check(m["p99_ratio"] <= 1.35, f"inference p99 under tandem is {m['p99_ratio']:.2f} <= 1.35 x Exclusive")
    check(m["train"] >= 0.3, f"training keeps {m['train']:.2f} >= 0.3 of Exclusive")


def floor(env):
    for local in ("0", "1"):
        d = env.daemon("slo")
        a = env.start("train-sim", "--seconds", "3", *REAL_TRAIN, role="training", TANDEM_JOB_LOCAL=local)
        b = env.start("infer-sim", "--seconds", "3", *REAL_INFER, role="inference", TANDEM_SLO_MS="2")
        time.sleep(2.0)
        # Read once both have registered (a loaded machine starts them late), not at a fixed instant.
        st = env.status_when(lambda s: bool(s["gpus"]) and "floor_ms" in (s["gpus"][0].get("slo") or {}), (a, b), 10)
        finish(a), finish(b)
        d.terminate()
        d.wait()
        check(st is not None, "tandemd reported the GPU's slo floor while both ran")
        slo = st["gpus"][0]["slo"]
        print(f"TANDEM_JOB_LOCAL={local}: floor {slo['floor_ms']:.2f} ms {slo['floor']}, {slo['below_floor_why']}")
        check(slo["below_floor"] is True, "a 2 ms target is below the floor (a request alone takes 4 ms)")
        if local == "0":
            check(slo["floor"]["collective_ms"] >= 4.0 and "collective" in slo["below_floor_why"],
                  f"the floor names training's collective ({slo['floor']['collective_ms']:.1f} ms, never held)")
        else:
            check(slo["collectives_held"] is True and slo["floor"]["collective_ms"] == 0,
                  "with TANDEM_JOB_LOCAL=1 the collective is held and not in the floor")


def fractional(env):
    d = env.daemon("slo", TANDEM_SLO_PERIOD_MS="0.1s")
    b = env.start("infer-sim", "--seconds", "4", "--rate", "50", *INFER, role="inference", TANDEM_SLO_MS="23.24")

    def history(s):
        return [h for g in s["gpus"] for h in ((g.get("slo") or {}).get("history") or []) if h["samples"]]

    # Once tandemd has the process's target and has judged a control period by it.
    st = env.status_when(lambda s: b.pid in slots_by_pid(s) and history(s), (b,))
    out, err = b.communicate(timeout=60)
    d.terminate()
    _, daemon_err = d.communicate(timeout=10)
    check(st is not None, f"tandemd saw the inference process and judged a control period {err[-300:]}")
    check("not valid" not in err and "not valid" not in daemon_err,
          f"no setting refused: {(err + daemon_err).strip()[-300:]!r}")
    slot = slots_by_pid(st)[b.pid]
    check(slot["slo_ms"] == 23.24, f"tandemctl status --json shows its target as 23.24 ms: {slot['slo_ms']}")
    targets = {h["target_ms"] for h in history(st)}
    check(targets == {23.24}, f"the controller judged latency against 23.24 ms: {sorted(targets)}")
    check(b.returncode == 0, f"infer-sim finished ({b.returncode})")


def hostile_holds(env):
    """docs/security.md: who may hold training, for how long."""
    from hostile_daemon_e2e import HELLO, HELLO_OK, ask, connect
    requests_open, activity = 176, 184  # tandem_client_page's requests_open (+ slo_us), request_activity_ns
    d = env.daemon("slo")
    a = env.start("train-sim", "--seconds", "12", "--kernel-us", "200", "--compute-kernels", "20", "--gap-us", "500",
                  role="training")
    st = env.registered(a)
    check(bool(st), "training registered")

    def launches():
        return slots_by_pid(env.status())[a.pid]["launches"]

    def rate(seconds):
        before = launches()
        time.sleep(seconds)
        return (launches() - before) / seconds

    alone = rate(1.0)
    s = connect(env.socket)
    kind, reply, fds = ask(s, HELLO, {"role": "inference", "gpu": st["gpus"][0]["uuid"]})
    check(kind == HELLO_OK, f"the hostile client registered as online inference ({reply})")
    page = mmap.mmap(fds[1], PAGE_BYTES, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    # One request, target 100 ms, opened and never ended nor touched.
    struct.pack_into("<IIQ", page, requests_open, 1, 100000, time.clock_gettime_ns(time.CLOCK_MONOTONIC))
    time.sleep(0.6)  # 4 x 100 ms, and idle_ms
    stuck = rate(1.0)
    # The same request, kept fresh for ever.
    stop = threading.Event()

    def refresh():
        while not stop.is_set():
            struct.pack_into("<Q", page, activity, time.clock_gettime_ns(time.CLOCK_MONOTONIC))
            time.sleep(0.01)

    t = threading.Thread(target=refresh, daemon=True)
    t.start()
    time.sleep(1.0)  # into a window that began with the request open
    per_second = [rate(1.0) for _ in range(3)]
    slo = env.status()["gpus"][0]["slo"]
    holds = slo["request_holds"]
    stop.set()
    t.join()
    s.close()
    a.kill()
    a.wait()
    d.terminate()
    d.wait()
    print(f"training launches/s: alone {alone:.0f}, beside a stuck request {stuck:.0f}, beside one kept open "
          f"{[round(r) for r in per_second]}; status {holds}")
    check(stuck >= 0.5 * alone, f"a stuck request does not hold training ({stuck:.0f} >= 0.5 x {alone:.0f} launches/s)")
    check(min(per_second) >= 0.01 * alone,
          f"a request kept open for ever leaves training launching every second ({min(per_second):.0f} >= 0.01 x {alone:.0f})")
    check(slo.get("requests_unheld") is True, "tandemd took it for a busy server's and lifted the hold")
    check(holds["stuck"] >= 1, "status counts the stuck request")


def main():
    build, case = sys.argv[1], sys.argv[2]
    env = Env(build)
    {"latency": latency, "step": step, "transparent": transparent, "daemon-killed": daemon_killed,
     "realistic-mps": realistic_mps, "realistic-timeslice": realistic_timeslice, "floor": floor,
     "fractional": fractional, "hostile-holds": hostile_holds}[case](env)
    print(f"slo e2e {case}: ok")


if __name__ == "__main__":
    main()
