#!/usr/bin/env python3
"""End-to-end checks of live SM partitioning (policy slo under MPS, green contexts) and of the
busy server, on the simulated GPU.

usage: green_e2e.py BUILD_DIR CASE [MODE...]
  order MODE...  tests/fixtures/green_order.cpp, whose digest depends on stream order, run
                 alone and then as a training process beside online inference while tandemd
                 moves its launches to green streams (TANDEM_SLO_PARTITION=50): the same digest,
                 launches redirected and switched, no green stream left behind where the
                 program destroyed its streams. MODEs: order destroy per_thread capture streams1000
  busy           time slicing, a closed-loop inference client (a request always open) within
                 its target (2.5 x its Exclusive p99: beside training under time slicing a
                 request waits a time slice now and then; the run's p99 within 1.05 x the
                 target the controller holds it at): training keeps at least 0.3 of
                 Exclusive (best of up to 3 rounds)
  mps            the realistic workload under MPS with default settings (no
                 TANDEM_SLO_TRAINING_SMS): tandemd partitions live, p99 within 1.10 x
                 Exclusive and training at least 0.7 (best of up to 4 rounds); the requests'
                 kernels (66 blocks on 132 SMs) leave training a ceiling of 50%, its start;
                 no round's training below 0.5 (a stall)
"""
import json
import os
import subprocess
import sys
import time

from e2e_util import Env, check, finish, real_driver

MPS = {"SIMGPU_SHARING": "mps"}
HELD = 1.05  # a run's p99 against the target the controller holds it at
ROUNDS = {"order": 400, "destroy": 300, "per_thread": 150, "capture": 150, "streams1000": 2}
# A real GPU runs them in a fraction of the simulator's time, shorter than preparing the green
# contexts takes (on the progress thread, after the first launch): ten times as many there.
if real_driver():
    ROUNDS = {mode: 10 * n for mode, n in ROUNDS.items()}


def run_fixture(env, mode, role=None, **settings):
    """The fixture's output, alone or under tandem with `role` (then also its statistics)."""
    fixtures = os.path.join(env.build, "tests", "fixtures")
    args = [os.path.join(fixtures, "fixture_green_order"), os.path.join(fixtures, "fixture_kernels.fatbin"), mode,
            str(ROUNDS[mode])]
    e = dict(env.base, **MPS, **settings)
    if role:
        e.update(LD_PRELOAD=os.path.join(env.build, "lib", "libtandem.so"), TANDEM_ROLE=role,
                 TANDEM_STATS_FILE=os.path.join(env.tmp, "green-stats-%p.json"))
    p = env.popen(args, env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out = finish(p, timeout=120)
    stats = None
    if role:
        path = os.path.join(env.tmp, f"green-stats-{p.pid}.json")
        with open(path) as f:
            stats = json.load(f)
    return out, stats


def order(env, modes):
    for mode in modes:
        alone, _ = run_fixture(env, mode)
        d = env.daemon("slo", TANDEM_SLO_PARTITION="50")
        # Requests open about half the time: the partition comes and goes with them.
        b = env.start("infer-sim", "--seconds", "60", "--kernels", "4", "--kernel-us", "1000", "--blocks", "66",
                      "--rate", "120", role="inference", TANDEM_SLO_MS="100", **MPS)
        time.sleep(0.5)
        under, stats = run_fixture(env, mode, role="training", TANDEM_SLO_PARTITION="50")
        st = env.status()
        b.kill()
        b.wait()
        d.terminate()
        d.wait()
        g = stats.get("green", {})
        print(f"{mode}: digest alone {alone['digest']}, under tandem {under['digest']}; {under['launches']} launches, "
              f"green {g}; tandemd live {st['gpus'][0]['slo'].get('live') if st else None}")
        check(under["digest"] == alone["digest"], f"{mode}: the program computes what it computes alone")
        check(g.get("partitions", 0) >= 2, f"{mode}: the training process prepared its partitions")
        check(g.get("redirected", 0) > 0 and g.get("switches", 0) > 0,
              f"{mode}: launches went to green streams ({g.get('redirected', 0)}) across switches ({g.get('switches', 0)})")
        left = {"order": 2, "per_thread": 4, "destroy": 0, "capture": 0, "streams1000": 0}[mode]
        check(g.get("live_streams", 99) <= left,
              f"{mode}: {g.get('live_streams')} green streams left at exit (at most {left}: the legacy and per-thread streams')")
        if mode == "streams1000":
            check(g.get("untracked", 0) > 0, "past the table's 256 streams, the others stay on their own streams")


def busy(env, rounds=3, seconds=5):
    train = ["--kernel-us", "200", "--compute-kernels", "100", "--comm-us", "500", "--gap-us", "11500"]
    best = None
    for r in range(1, rounds + 1):
        ex_train = finish(env.start("train-sim", "--seconds", "3", *train))["iters_per_s"]
        ex = finish(env.start("infer-sim", "--seconds", "3", "--closed-loop", "--kernel-us", "1000"))
        slo_ms = max(1, round(2.5 * ex["p99_ms"]))  # a loose target: the client is within it
        d = env.daemon("slo")
        a = env.start("train-sim", "--seconds", str(seconds), *train, role="training")
        time.sleep(0.3)
        b = env.start("infer-sim", "--seconds", str(seconds - 0.5), "--closed-loop", "--kernel-us", "1000",
                      role="inference", TANDEM_SLO_MS=str(slo_ms))
        time.sleep(seconds / 2)
        st = env.status()
        inf = finish(b)
        t = finish(a)["iters_per_s"] / ex_train
        d.terminate()
        d.wait()
        slo = st["gpus"][0]["slo"] if st else {}
        p99_x = inf["p99_ms"] / ex["p99_ms"]
        print(f"round {r}: closed loop, target {slo_ms} ms: p99 {inf['p99_ms']:.2f} ms ({p99_x:.2f}x Exclusive), "
              f"training {t:.2f} of Exclusive; tandemd busy {slo.get('busy_fraction', 0):.2f}, "
              f"unheld {slo.get('requests_unheld')}, duty {slo.get('duty', 0):.2f}")
        # The controller holds the p99 at the target, not under it: a run's p99 lands within a few
        # percent either side of it (one CI round: 11.004 ms against 11).
        held = inf["p99_ms"] <= HELD * slo_ms
        if best is None or (held, t) > (best["held"], best["train"]):
            best = {"train": t, "p99": inf["p99_ms"], "slo_ms": slo_ms, "slo": slo, "held": held}
        if held and t >= 0.3:
            break
    check(best["slo"].get("requests_unheld") is True, "tandemd lets training run beside back-to-back requests")
    check(best["held"], f"the client holds its target ({best['p99']:.2f} <= {HELD} x {best['slo_ms']} ms)")
    check(best["train"] >= 0.3, f"training keeps {best['train']:.2f} >= 0.3 of Exclusive")


def mps(env, rounds=4, seconds=6):
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from slo_e2e import realistic  # the same workload and baseline checks
    m = realistic(env, "mps", 1.10, 0.7, 1.1, rounds=rounds)
    check(m["slo"].get("live") is True, "tandemd partitions live by default (green contexts, MPS)")
    check(m["slo"].get("partition_ceiling_pct") == 50,
          f"the requests' kernels leave training at most half the SMs: {m['slo'].get('partition_ceiling_pct')}")
    check(m["p99_ratio"] <= 1.10, f"inference p99 under tandem is {m['p99_ratio']:.2f} <= 1.10 x Exclusive")
    check(m["train"] >= 0.7, f"training keeps {m['train']:.2f} >= 0.7 of Exclusive")
    # A stall is no noise: training stopped for seconds (0.08-0.25 of Exclusive) in about one
    # run of five when a marker before a collective was skipped (progress.h).
    check(min(m["trained"]) >= 0.5, f"training never stalls in a round: {m['trained']}")


def main():
    build, case = sys.argv[1], sys.argv[2]
    env = Env(build)
    if case == "order":
        order(env, sys.argv[3:] or list(ROUNDS))
    else:
        {"busy": busy, "mps": mps}[case](env)
    print(f"green e2e {case}: ok")


if __name__ == "__main__":
    main()
