#!/usr/bin/env python3
"""tandem's policies with real PyTorch programs as the workloads, on the simulated GPU:
examples/pytorch/train.py is the training job, examples/pytorch/serve.py the inference server.
Without the project's venv the test is skipped (exit 77) with the reason.

  fill  training (60 ms of GPU work a step, then 30 ms of data loading: a bubble) beside
        serve.py as a batch filler (closed loop, 4 ms of GPU work a request): under tandem
        training keeps >= 0.95 of Exclusive, Co-Exec is clearly lower (<= 0.90), the filler uses
        training's bubbles (bubble use: its throughput over its Exclusive throughput times
        training's idle share, >= 0.3 in every round and >= 0.6 in the median one; it waited at
        its gate) and training never waited at a gate
  fill-online  the same training beside serve.py as online inference (TANDEM_ROLE=inference,
        Poisson arrivals, 20 a second, 4 ms of GPU work a request) under policy fill, on a GPU
        with MPS (SIMGPU_SHARING=mps) in every configuration: SpecInF's comparison with MPS
        Co-Exec. Two servers, one seen by its synchronizations, one by tandem's client API
        (--tandem-requests). For each, under tandem (TANDEM_FILL_ONLINE_HOLD, 5%): training
        keeps >= 0.95 of Exclusive, requests run at once while they may hold training (p50 <=
        1.5 x MPS Co-Exec's; about 3 x when every request waits for a bubble, as with the
        setting at 0), and their p95 exceeds MPS Co-Exec's by at most one training iteration
        (the wait for a bubble, once a second's holds are spent). SpecInF's goal, p95 <= 0.5 x
        MPS Co-Exec's, is printed, not asserted: not met (1.17-1.25 x; the simulated MPS places
        blocks in the order kernels reach the GPU, which makes its p95 6-7 x Exclusive's, as on
        an H200; the requests that come once a second's holds are spent wait for a bubble,
        docs/scheduler.md)
  slo   serve.py as online inference (Poisson arrivals, 20 a second, 20 ms of GPU work a
        request, TANDEM_SLO_MS 100) beside training: under tandemd --policy slo its p99 is
        held at the target (<= 1.2 x the target, or x Exclusive's p99 where the host's noise
        puts that higher) and its SLO attainment >= 0.9 (or Exclusive's less 0.05, where that
        noise keeps Exclusive under 0.95), Co-Exec's p99 is clearly worse (>= 1.5 x
        Exclusive), and training keeps > 0.2 of Exclusive

How it measures, on a 2-core machine shared with builds: a PyTorch step is mostly GPU time
(large element-wise kernels, examples/pytorch/gpu_time.py), so the ratios measure the GPU's
sharing rather than the host. Loading cuBLAS and cuDNN costs each process tens of seconds of
CPU there, so the two programs start once, both under libtandem.so, warm up, and then run
through rounds of configurations switched on and off while they run: a program's load by its
pause file (--pause-file), tandem by tandemd's presence (without a daemon libtandem.so fails
open: nothing is gated, as if tandem were not there; with one, both register within a second).
Each configuration is a window of some seconds; throughput and latency are read from the
programs' per-step and per-request lines in that window. Noise from other work only ever
lowers a throughput or raises a latency, so each figure is judged by its best round; every
round is printed.

usage: torch_policy_e2e.py BUILD_DIR CASE [ROUNDS]
"""
import json
import os
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from e2e_util import Env, check, preload, wait_for  # noqa: E402
from torch_e2e import PYTHON, example, require_torch  # noqa: E402

WINDOW_S = 6.0
SETTLE_S = 0.5  # left out at a window's start: the switch itself
TRAIN = ["--gpu-ms", "60", "--kernel-ms", "1", "--sleep-ms", "30", "--warmup-steps", "3", "--replays", "0"]
TRAIN_GPU_S = 0.060  # a step's GPU work (its large kernels; the model's own are small beside them)
FILLER = ["--gpu-ms", "4", "--kernel-ms", "1", "--warmup", "3"]
TRAIN_SLEEP_S = 0.030
# Online inference under policy fill: requests of 4 ms of GPU work, Poisson arrivals (SpecInF's
# online workload) at the case's rate: 20 a second, 10 in fill-online-10.
ONLINE_FILL = ["--gpu-ms", "4", "--kernel-ms", "1", "--warmup", "3"]  # and a rate
ONLINE_WINDOW_S = 8.0
# Under policy slo training's kernels are short: the simulated GPU switches processes only
# between kernels, so a request waits for at most one of them (docs/slo.md).
SLO_TRAIN = ["--gpu-ms", "60", "--kernel-ms", "0.5", "--sleep-ms", "30", "--warmup-steps", "3", "--replays", "0"]
# Requests of 20 ms of GPU work, so that the host's noise is small beside it; at 20 a second the
# GPU is busy with them about 40% of the time. Alone their p99 is 65-85 ms on the busy 2-core
# development machine (the host's stalls add to the GPU time): the target is above it, as an
# operator's would be.
ONLINE = ["--gpu-ms", "20", "--kernel-ms", "2", "--warmup", "5", "--rate", "20"]
SLO_MS = 100
SLO_WINDOW_S = 10.0  # a p99 wants a few hundred requests


class Program:
    """A PyTorch example under libtandem.so, its load switched by a pause file, its output
    lines collected as they come (with their per-step or per-request records)."""

    def __init__(self, env, name, script, args, role, length=("--seconds", "3600"), **settings):
        self.pause = os.path.join(env.tmp, f"{name}.pause")
        open(self.pause, "w").close()
        e = dict(env.base, LD_PRELOAD=preload(env.build), TANDEM_ROLE=role,
                 TANDEM_STATS_FILE=os.path.join(env.tmp, "stats-%p.json"), **settings)
        self.p = subprocess.Popen([PYTHON, example(script), *length, "--pause-file", self.pause, *args],
                                  env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.records, self.summary, self.err = [], None, ""
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._read_err, daemon=True).start()

    def _read(self):
        for line in self.p.stdout:
            if line.startswith("{"):
                r = json.loads(line)
                self.records.append(r)
                if "example" in r:
                    self.summary = r

    def _read_err(self):
        self.err = self.p.stderr.read()

    def ready(self):
        return any("ready" in r for r in self.records)

    def run(self, on):
        if on and os.path.exists(self.pause):
            os.unlink(self.pause)
        elif not on:
            open(self.pause, "w").close()

    def between(self, t0, t1):
        return [r for r in self.records if "t" in r and t0 <= r["t"] < t1]

    def stop(self, timeout=120):
        self.p.send_signal(2)  # SIGINT: the program ends its loop and prints its summary
        self.p.wait(timeout=timeout)
        time.sleep(0.2)
        if self.p.returncode != 0:
            raise SystemExit(f"FAIL: {self.p.args[1]} exited with {self.p.returncode}:\n{self.err[-3000:]}")
        return self.summary

    def kill(self):
        if self.p.poll() is None:
            self.p.kill()
            self.p.wait()

    def stats(self, env):
        with open(os.path.join(env.tmp, f"stats-{self.p.pid}.json")) as f:
            return json.load(f)


def window(seconds=WINDOW_S):
    """Waits out one configuration's window; returns the part of it that counts."""
    t0 = time.time()
    time.sleep(seconds)
    return t0 + SETTLE_S, time.time()


def steps_per_s(train, w):
    return len(train.between(*w)) / (w[1] - w[0])


def pct(records, q):
    """The q-quantile of the records' latencies (ms); infinite without records."""
    ms = sorted(r["ms"] for r in records)
    return ms[min(len(ms) - 1, int(q * len(ms)))] if ms else float("inf")


def p99(records):
    return pct(records, 0.99)


def attainment(records):
    return sum(r["ms"] <= SLO_MS for r in records) / max(1, len(records))


def with_daemon(env, policy, programs, body, **settings):
    """`body()` while tandemd runs (TANDEM_* `settings` for it), from when every program has
    registered with it."""
    d = env.daemon(policy, **settings)
    try:
        pids = {p.p.pid for p in programs}
        registered = wait_for(lambda: pids <= {s["pid"] for g in (env.status() or {"gpus": []})["gpus"]
                                              for s in g["slots"]}, seconds=10)
        check(registered, f"the {len(pids)} programs registered with tandemd ({policy})")
        return body()
    finally:
        d.terminate()
        d.wait()


def warmed_up(programs):
    """Waits until every program has warmed up (loading cuBLAS takes seconds of CPU, tens on a
    busy machine); kills them all and fails if one exits first."""
    began = time.monotonic()
    ok = wait_for(lambda: all(p.ready() for p in programs) or any(p.p.poll() is not None for p in programs),
                  seconds=600)
    if not (ok and all(p.ready() for p in programs)):
        for p in programs:
            p.kill()
        raise SystemExit("FAIL: the programs did not warm up: " + " ".join(p.err[-1500:] for p in programs))
    print(f"{len(programs)} programs warmed up in {time.monotonic() - began:.0f} s")
    return programs


def start_pair(env, train_args, other_args, other_role, **other_settings):
    train = Program(env, "train", "train.py", ["--log-steps", *train_args], "training")
    other = Program(env, "serve", "serve.py", ["--log-requests", *other_args], other_role, **other_settings)
    return warmed_up([train, other])


def fill(env, rounds):
    train, filler = start_pair(env, TRAIN, FILLER, "batch-inference")
    results, gpu = [], None
    try:
        for n in range(1, rounds + 1):
            train.run(True)
            alone = steps_per_s(train, window())
            train.run(False)
            filler.run(True)
            w = window()
            filler_alone = len(filler.between(*w)) / (w[1] - w[0])
            train.run(True)
            w = window()
            coexec, co_requests = steps_per_s(train, w), len(filler.between(*w))

            def tandem_window():
                w = window()
                return w, (env.status() or {"gpus": [None]})["gpus"][0]

            w, gpu = with_daemon(env, "fill", (train, filler), tandem_window)
            tandem, requests = steps_per_s(train, w), len(filler.between(*w))
            filler.run(False)
            # SpecInF's bubble use: the filler's throughput over what it would do alone in the
            # share of the time training leaves the GPU idle (its data loading; training's own
            # GPU time is its step rate times the step's GPU work).
            idle = max(1e-3, 1.0 - tandem * TRAIN_GPU_S)
            use = requests / (w[1] - w[0]) / (filler_alone * idle)
            results.append({"alone": alone, "coexec": coexec / alone, "tandem": tandem / alone, "requests": requests,
                            "use": use})
            print(f"round {n}: training {alone:.2f} steps/s alone; co-exec {coexec / alone:.3f} (filler {co_requests} "
                  f"requests), tandem {tandem / alone:.3f} of Exclusive (filler {requests} requests, alone "
                  f"{filler_alone:.1f}/s, bubble use {use:.3f}); tandemd: {gpu['bubbles']} bubbles, mean "
                  f"{gpu['mean_bubble_ms']:.1f} ms, busy {gpu['mean_busy_ms']:.1f} ms")
        train.stop()
        filler.stop()
    finally:
        train.kill()
        filler.kill()
    kept = max(r["tandem"] for r in results)
    co = min(r["coexec"] for r in results)
    print("spread: tandem " + " ".join(f"{r['tandem']:.3f}" for r in results) +
          "; co-exec " + " ".join(f"{r['coexec']:.3f}" for r in results) +
          "; bubble use " + " ".join(f"{r['use']:.3f}" for r in results))
    check(kept >= 0.95, f"training under tandem keeps {kept:.3f} >= 0.95 of Exclusive (best round)")
    check(co <= 0.90, f"Co-Exec is measurably lower ({co:.3f} <= 0.90, lowest round)")
    t, f = train.stats(env), filler.stats(env)
    check(gpu["bubbles"] >= 20, f"tandemd saw training's bubbles ({gpu['bubbles']})")
    check(t["gate"]["waits"] == 0, f"training never waited at a gate ({t['gate']['waits']})")
    check(f["gate"]["waits"] > 0, f"the filler was held while training computed ({f['gate']['waits']} gate waits)")
    # Every round, not the best: the filler's learned costs once settled high in most runs
    # (13-18 requests in a window against 328-363 in the others, a bubble use near 0.05). Its
    # figure itself, by the median round: one round's bubble use ranges 0.48-0.92 on this
    # 2-core machine from run to run, with this library and with the one before it.
    uses = sorted(r["use"] for r in results)
    check(uses[0] >= 0.3, f"the filler uses its bubbles in every round (bubble use {uses[0]:.3f} >= 0.3, lowest round)")
    median = uses[len(uses) // 2]
    check(median >= 0.6, f"the filler uses most of its bubbles (bubble use {median:.3f} >= 0.6, median round)")


def answered_in_bubbles(requests, train, w):
    """The share of `requests` answered while training was in its data-loading pause (its step
    line is printed as the pause ends, TRAIN_SLEEP_S after the step's GPU work was done)."""
    pauses = [(r["t"] - TRAIN_SLEEP_S - 0.002, r["t"] + 0.002) for r in train.between(w[0] - 1, w[1] + 1)]
    ends = [r["t"] + r["ms"] / 1e3 for r in requests]
    return sum(any(a <= e <= b for a, b in pauses) for e in ends) / max(1, len(ends))


def fill_online(env, rounds, rate="20", goal=False):
    """serve.py as online inference beside train.py, `rate` requests a second, under MPS Co-Exec
    and under tandem's policy fill; `goal`: asserts SpecInF's (p95 at most half of MPS
    Co-Exec's with training at 0.95 or more) in a round."""
    env.base["SIMGPU_SHARING"] = "mps"  # SpecInF's baseline is MPS Co-Exec: the same GPU in every configuration
    # Each training process warms up alone: train.py sizes its kernels by timing one at start,
    # and timed beside the other programs' warm-up one copy got fewer, longer kernels than the
    # other (MPS Co-Exec's training at 1.4 x the rate of the one measured alone).
    train = Program(env, "train", "train.py", ["--log-steps", *TRAIN], "training")
    warmed_up([train])
    # MPS Co-Exec's training: the same program as a process tandem leaves alone (role none), at
    # MPS's default priority. A training process asks MPS for below-normal priority when it
    # starts (TANDEM_MPS_PRIORITY), daemon or not, and a process's MPS priority is fixed then.
    train_co = Program(env, "train-co", "train.py", ["--log-steps", *TRAIN], "none")
    warmed_up([train_co])
    load = [*ONLINE_FILL, "--rate", rate]
    servers = {"sync": Program(env, "serve", "serve.py", ["--log-requests", *load], "inference"),
               "api": Program(env, "serve-api", "serve.py", ["--log-requests", "--tandem-requests", *load],
                              "inference")}
    warmed_up(list(servers.values()))
    results = {k: [] for k in servers}
    try:
        for n in range(1, rounds + 1):
            train.run(True)
            alone = steps_per_s(train, window())
            train.run(False)
            # Exclusive and MPS Co-Exec once a round: the two servers are the same program, and
            # without tandemd the client API's calls only time the requests.
            sync = servers["sync"]
            sync.run(True)
            ex = sync.between(*window(ONLINE_WINDOW_S))
            train_co.run(True)
            w = window(ONLINE_WINDOW_S)
            co = sync.between(*w)
            co_train, co_in = steps_per_s(train_co, w) / alone, answered_in_bubbles(co, train_co, w)
            sync.run(False)
            train_co.run(False)
            train.run(True)

            def tandem_windows():
                out = {}
                for k, srv in servers.items():
                    srv.run(True)
                    w = window(ONLINE_WINDOW_S + 2)
                    w = (w[1] - ONLINE_WINDOW_S, w[1])  # after tandemd has learned the bubbles and the requests
                    gpu = (env.status() or {"gpus": [{}]})["gpus"][0]
                    slot = next((x for x in gpu.get("slots", []) if x["pid"] == srv.p.pid), {})
                    reqs = srv.between(*w)
                    out[k] = (reqs, steps_per_s(train, w) / alone, answered_in_bubbles(reqs, train, w), gpu, slot)
                    srv.run(False)
                return out

            tandem = with_daemon(env, "fill", (train, *servers.values()), tandem_windows)
            for k, (reqs, kept, inb, gpu, slot) in tandem.items():
                waits = slot.get("admission_waits", 0)
                r = {"ex_p50": pct(ex, 0.5), "ex_p95": pct(ex, 0.95), "co_p50": pct(co, 0.5), "co_p95": pct(co, 0.95),
                     "co_train": co_train, "co_in": co_in, "p50": pct(reqs, 0.5), "p95": pct(reqs, 0.95), "train": kept,
                     "in": inb, "waited": waits / max(1, slot.get("requests", 0)),
                     "wait_ms": slot.get("admission_wait_ms", 0.0) / max(1, waits),
                     "iteration_ms": gpu.get("mean_busy_ms", 0.0) + gpu.get("mean_bubble_ms", 0.0)}
                r["vs_mps"] = r["p95"] / r["co_p95"]
                results[k].append(r)
                print(f"round {n} {k}: p50/p95 ms exclusive {r['ex_p50']:.1f}/{r['ex_p95']:.1f}, MPS Co-Exec "
                      f"{r['co_p50']:.1f}/{r['co_p95']:.1f} (training {co_train:.3f}, answered in bubbles {co_in:.2f}), "
                      f"tandem {r['p50']:.1f}/{r['p95']:.1f} = {r['vs_mps']:.2f} x MPS's p95 (training {kept:.3f}, "
                      f"answered in bubbles {inb:.2f}, {len(reqs)} requests; {r['waited']:.2f} of them waited for a "
                      f"bubble, {r['wait_ms']:.1f} ms on average; tandemd: training iteration {r['iteration_ms']:.1f} ms, "
                      f"learned request {slot.get('request_ms', 0.0):.1f} ms, horizon "
                      f"{(gpu.get('online_holds') or {}).get('horizon_ms', 0.0):.1f} ms)")
        for p in (train, train_co, *servers.values()):
            p.stop()
    finally:
        for p in (train, train_co, *servers.values()):
            p.kill()
    for k, rs in results.items():
        print(f"spread {k}: tandem p95 / MPS Co-Exec p95 " + " ".join(f"{r['vs_mps']:.2f}" for r in rs) +
              "; training " + " ".join(f"{r['train']:.3f}" for r in rs) + "; answered in bubbles " +
              " ".join(f"{r['in']:.2f}" for r in rs) + " (MPS Co-Exec " + " ".join(f"{r['co_in']:.2f}" for r in rs) + ")")
    for k, rs in results.items():
        kept = max(r["train"] for r in rs)
        check(kept >= 0.95, f"{k}: training under tandem keeps {kept:.3f} >= 0.95 of Exclusive (best round)")
        # Run at once, holding training, ahead of training's queued kernels (training asks MPS for
        # below-normal priority): p50 0.18-0.26 x MPS Co-Exec's, where a held request took turns
        # with them at normal priority (1.0-1.5 x).
        p50 = min(r["p50"] / r["co_p50"] for r in rs)
        check(p50 <= 0.5, f"{k}: requests run at once, ahead of training's kernels: p50 {p50:.2f} <= 0.5 x MPS "
              f"Co-Exec's (best round)")
        # The rest wait for the bubble when it is due within the hold horizon, which paces the
        # holds through each second: best rounds 0.40-0.64 x measured, 0.79-1.14 without priority
        # and horizon (every request held until a second's part was spent, the rest waiting for a
        # bubble up to a whole compute phase).
        best = min(r["vs_mps"] for r in rs)
        check(best <= 0.7, f"{k}: tandem's p95 {best:.2f} <= 0.7 x MPS Co-Exec's (best round)")
        worst = max(r["vs_mps"] for r in rs)
        met = sum(r["vs_mps"] <= 0.5 and r["train"] >= 0.95 for r in rs)
        print(f"note {k}: SpecInF's goal, p95 <= 0.5 x MPS Co-Exec's with training >= 0.95, is met in {met} of "
              f"{len(rs)} rounds (p95 {best:.2f}-{worst:.2f} x)")
        if goal:
            # 10 requests a second (SpecInF's Poisson mean): met in 10 of 12 rounds measured (p95
            # 0.14-0.73 x, training 0.96-1.00); at 20 a second, where the holds' 5% runs short, in
            # 1 of 6.
            check(met >= 1, f"{k}: SpecInF's goal met in a round at {rate} requests a second")


def slo(env, rounds):
    train, online = start_pair(env, SLO_TRAIN, [*ONLINE, "--slo-ms", str(SLO_MS)], "inference",
                               TANDEM_SLO_MS=str(SLO_MS))
    results = []
    try:
        for n in range(1, rounds + 1):
            train.run(True)
            alone = steps_per_s(train, window(SLO_WINDOW_S))
            train.run(False)
            online.run(True)
            ex = online.between(*window(SLO_WINDOW_S))
            train.run(True)
            w = window(SLO_WINDOW_S)
            co, co_train = online.between(*w), steps_per_s(train, w)
            w = with_daemon(env, "slo", (train, online), lambda: window(SLO_WINDOW_S + 2))
            # The controller needs a few periods to find training's duty cycle: the last part.
            w = (max(w[0], w[1] - SLO_WINDOW_S), w[1])
            tandem, tandem_train = online.between(*w), steps_per_s(train, w)
            online.run(False)
            r = {"ex_p99": p99(ex), "co": p99(co) / p99(ex), "tandem": p99(tandem) / p99(ex),
                 "ex_attained": attainment(ex), "co_attained": attainment(co), "attained": attainment(tandem),
                 "co_train": co_train / alone, "train": tandem_train / alone}
            results.append(r)
            print(f"round {n}: inference p99 exclusive {r['ex_p99']:.1f} ms ({len(ex)} requests), co-exec {r['co']:.2f}x, "
                  f"tandem {r['tandem']:.2f}x; SLO {SLO_MS} ms attained: exclusive {r['ex_attained']:.3f}, co-exec "
                  f"{r['co_attained']:.3f}, tandem {r['attained']:.3f}; training {alone:.2f} steps/s alone, co-exec "
                  f"{r['co_train']:.2f}, tandem {r['train']:.2f} of Exclusive")
        train.stop()
        online.stop()
    finally:
        train.kill()
        online.kill()
    print("spread: tandem p99 " + " ".join(f"{r['tandem']:.2f}" for r in results) + "; attainment " +
          " ".join(f"{r['attained']:.3f}" for r in results) + "; training " + " ".join(f"{r['train']:.2f}" for r in results))
    # The policy holds p99 at the target, spending the slack on training: the bound is the
    # target, or Exclusive's own p99 where the host's noise puts that over it.
    for r in results:
        r["held"] = r["tandem"] * r["ex_p99"] / max(SLO_MS, r["ex_p99"])
    best = min(results, key=lambda r: r["held"])
    check(best["held"] <= 1.2, f"inference p99 under tandem ({best['tandem'] * best['ex_p99']:.1f} ms) is "
          f"{best['held']:.2f} <= 1.2 x the larger of the {SLO_MS} ms target and Exclusive's p99 "
          f"({best['ex_p99']:.1f} ms) (best round)")
    # The target is fixed when the server starts, before Exclusive is measured; where the host's
    # noise keeps Exclusive itself under it, tandem is held to Exclusive's attainment less 0.05.
    best = max(results, key=lambda r: r["attained"] - min(0.9, r["ex_attained"] - 0.05))
    check(best["attained"] >= min(0.9, best["ex_attained"] - 0.05),
          f"SLO attainment under tandem {best['attained']:.3f} >= 0.9, or Exclusive's ({best['ex_attained']:.3f}) "
          f"less 0.05 (best round)")
    check(max(r["co"] for r in results) >= 1.5, "Co-Exec's p99 is clearly worse (>= 1.5 x Exclusive)")
    check(max(r["train"] for r in results) > 0.2, "training keeps > 0.2 of Exclusive under tandem")


def main():
    build, case = sys.argv[1], sys.argv[2]
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    require_torch()
    env = Env(build)
    t0 = time.monotonic()
    cases = {"fill": fill, "fill-online": fill_online, "slo": slo,
             "fill-online-10": lambda env, rounds: fill_online(env, rounds, rate="10", goal=True)}
    cases[case](env, rounds)
    print(f"torch policy e2e {case}: ok ({time.monotonic() - t0:.0f} s)")


if __name__ == "__main__":
    main()
