#!/usr/bin/env python3
"""The fill policy with fillers that launch the way frameworks do, on the simulated GPU, as
ratios measured in one run. Training is train-sim with data-loading bubbles (28 ms of compute,
then a 12 ms host gap: 30% of each iteration); the filler is infer-sim with a framework's launch
pattern: per request 4 element-wise kernels of 1 ms over 16.9M elements (a thread an element) and
40 small kernels, each after 20 us of host work (PyTorch: tens of small kernels with Python
between them, a few large ones).

Bubble use is the filler's throughput under tandem over its Exclusive throughput times the
share of the run training leaves idle (SpecInF's measure): 1.0 means the filler ran as if alone
in every bubble.

usage: fill_frameworks_e2e.py BUILD_DIR CASE
  framework  one framework-shaped filler: training keeps >= 0.95 of Exclusive and the filler's
             bubble use is >= 0.6 (best of up to 3 rounds). A cost per launch learned from the
             wall time between completion markers (host gaps, polling) starved it (< 0.1).
  fillers    2 and 4 such fillers: training keeps >= 0.95, their bubble use together >= 0.6,
             and each filler gets at least half of what the busiest one gets (the share is
             split evenly). Their kernels, timed beside each other's, were learned at up to four
             times their length until such timings stopped raising a cost: 0.53-0.64 with 4,
             one filler often a fifth of the others (docs/scheduler.md, "What a launch costs")
  no-sync    a filler that launches without ever synchronizing: its queue is bounded by the
             in-flight bound (the launches block at the gate), training keeps >= 0.95
  long-kernel  a filler whose every kernel (50 ms) is longer than any bubble: it waits at its gate
             (training keeps >= 0.95) and tandemctl status says why; without training it runs
  graphs     a filler replaying a CUDA graph of 4 x 500 us kernels per request: the replay is
             charged its learned GPU time and fills the bubbles (bubble use >= 0.4: a request is one
             2 ms launch granted whole, then a synchronize, so a 12 ms bubble takes about three)
  with-online  training, an online server (20 Poisson requests/s of 4 x 1 ms) and a framework-
             shaped filler under the fill policy's defaults (requests hold training within 5% of
             each second): training keeps >= 0.95, the filler still uses >= 0.3 of the bubbles,
             and the server's p50 beside the filler is at most 1.5 x its p50 without it (a
             filler yields to every open request; in bubbles beside the filler's kernels the
             requests took twice as long), best of up to 3 rounds
  flood      8 filler threads launching without synchronizing, one filler that takes all free
             memory, one killed mid-kernel: training keeps >= 0.95, tandemd answers, nothing hangs
  daemon-stalled  tandemd stopped (SIGSTOP) for a second beside training and a filler that never
             synchronizes: the filler fails open, but its queue stays bounded by its own
             completions, so it ends on time and training is not left behind seconds of its work
"""
import os
import signal
import subprocess
import sys
import time

from e2e_util import Env, check, finish, wait_for

SECONDS = "4"
TRAIN = ["--compute-kernels", "4", "--kernel-us", "7000", "--comm-us", "0", "--gap-us", "12000"]
# 16.9M elements: 66000 blocks, 500 waves of the simulated GPU's 132 SMs: 1 ms a kernel.
FRAMEWORK = ["--kernels", "4", "--elementwise", "16896000", "--small-kernels", "40", "--host-us", "20"]


def idle_share(train):
    """The share of the run training left the GPU idle (its data-loading gaps)."""
    return max(0.0, 1.0 - train["iters_per_s"] * train["compute_us"] / 1e6)


def tandem_run(env, fillers, filler_args=FRAMEWORK, seconds=SECONDS, **settings):
    """Training beside `fillers` fillers under tandemd: (training summary, filler summaries, status)."""
    d = env.daemon(**settings)
    t = env.start("train-sim", "--seconds", seconds, *TRAIN, role="training")
    fs = [env.start("infer-sim", "--seconds", seconds, "--seed", str(i), *filler_args, role="batch-inference")
          for i in range(fillers)]
    time.sleep(float(seconds) / 2)
    status = env.status()
    train = finish(t, timeout=60)
    filled = [finish(f, timeout=60) for f in fs]
    d.terminate()
    d.wait()
    return train, filled, status


def exclusive(env, filler_args=FRAMEWORK):
    train = finish(env.start("train-sim", "--seconds", SECONDS, *TRAIN))
    filler = finish(env.start("infer-sim", "--seconds", SECONDS, *filler_args))
    return train, filler


def bubble_use(fillers, alone, train):
    return sum(f["throughput_rps"] for f in fillers) / (alone["throughput_rps"] * idle_share(train))


def shared_rounds(env, fillers, filler_args=FRAMEWORK, rounds=3, want=0.6):
    """Best of up to `rounds` rounds (noise only lowers throughputs): (kept, use, per-filler rps)."""
    best = (0.0, 0.0, [])
    for r in range(1, rounds + 1):
        alone_train, alone_filler = exclusive(env, filler_args)
        train, filled, _ = tandem_run(env, fillers, filler_args)
        kept = train["iters_per_s"] / alone_train["iters_per_s"]
        use = bubble_use(filled, alone_filler, train)
        rps = [f["throughput_rps"] for f in filled]
        print(f"round {r}: {fillers} filler(s): training {kept:.3f} of Exclusive, bubble use {use:.3f} "
              f"(filler alone {alone_filler['throughput_rps']:.1f} req/s, under tandem {rps}; idle share "
              f"{idle_share(train):.3f})")
        best = (max(best[0], kept), max(best[1], use), rps if use >= best[1] else best[2])
        if best[0] >= 0.95 and best[1] >= want:
            break
    return best


def framework(env):
    kept, use, _ = shared_rounds(env, 1)
    check(kept >= 0.95, f"training keeps {kept:.3f} >= 0.95 of Exclusive beside a framework-shaped filler")
    check(use >= 0.6, f"the framework-shaped filler's bubble use is {use:.3f} >= 0.6")


def fillers(env):
    for n in (2, 4):
        kept, use, rps = shared_rounds(env, n)
        check(kept >= 0.95, f"training keeps {kept:.3f} >= 0.95 of Exclusive beside {n} fillers")
        check(use >= 0.6, f"{n} fillers together use {use:.3f} >= 0.6 of the bubbles")
        check(min(rps) >= 0.5 * max(rps), f"each of the {n} fillers gets at least half of the busiest one's requests ({rps} requests/s)")


def no_sync(env):
    alone_train = finish(env.start("train-sim", "--seconds", SECONDS, *TRAIN))
    best, pending = 0.0, []
    for r in range(2):
        d = env.daemon()
        t = env.start("train-sim", "--seconds", SECONDS, *TRAIN, role="training")
        # It stops launching before training ends (after, nothing gates it).
        f = env.start("infer-sim", "--seconds", str(float(SECONDS) - 1), *FRAMEWORK, "--no-sync",
                      role="batch-inference")
        for _ in range(6):
            time.sleep(0.4)
            st = env.status()
            slots = st["gpus"][0]["slots"] if st and st["gpus"] else []
            pending += [(s["issued_ns"] - s["completed_ns"]) / 1e6 for s in slots if s["gate"] == "tokens"]
        kept = finish(t, timeout=60)["iters_per_s"] / alone_train["iters_per_s"]
        filler = finish(f, timeout=60)
        d.terminate()
        d.wait()
        print(f"round {r + 1}: training {kept:.3f} of Exclusive; filler {filler['requests']} requests issued; "
              f"its work in flight seen {max(pending, default=0):.2f} ms at most")
        best = max(best, kept)
    check(best >= 0.95, f"beside a filler that never synchronizes, training keeps {best:.3f} >= 0.95")
    check(pending and max(pending) <= 6.0, f"its work in flight stays bounded ({max(pending, default=0):.2f} ms <= 6 ms: "
          "the 4 ms bound and one launch)")


def long_kernel(env):
    args = ["--kernels", "1", "--kernel-us", "50000"]
    alone_train = finish(env.start("train-sim", "--seconds", SECONDS, *TRAIN))
    d = env.daemon()
    t = env.start("train-sim", "--seconds", SECONDS, *TRAIN, role="training")
    f = env.start("infer-sim", "--seconds", SECONDS, *args, role="batch-inference")
    why = []
    for _ in range(30):
        time.sleep(0.1)
        st = env.status() or {"gpus": []}
        why = [w for g in st["gpus"] for w in g.get("admission_refused", []) if "longer than the longest bubble" in w]
        if why:
            break
    text = subprocess.run([os.path.join(env.build, "bin", "tandemctl"), "status", "--socket", env.socket],
                          capture_output=True, text=True, timeout=10).stdout
    kept = finish(t, timeout=60)["iters_per_s"] / alone_train["iters_per_s"]
    filler = finish(f, timeout=60)
    d.terminate()
    d.wait()
    print(f"training {kept:.3f} of Exclusive; filler {filler['requests']} requests; status: {why}")
    check(kept >= 0.95, f"training keeps {kept:.3f} >= 0.95 beside a filler whose kernels outlast every bubble")
    check(filler["requests"] <= 3, f"the filler waited rather than run into training ({filler['requests']} requests: "
          "only its first kernels, before their length was known)")
    check(bool(why) and "waits at its gate with one launch of" in text,
          "tandemctl status says it waits for a bubble longer than its launch")
    # Without training nothing holds it back.
    d = env.daemon()
    alone = finish(env.start("infer-sim", "--seconds", "1", *args, role="batch-inference"), timeout=30)
    d.terminate()
    d.wait()
    check(alone["requests"] >= 10, f"without training it runs ({alone['requests']} requests in 1 s)")


def graphs(env):
    args = ["--kernels", "4", "--kernel-us", "500", "--graph"]
    kept, use, _ = shared_rounds(env, 1, args, want=0.4)
    check(kept >= 0.95, f"training keeps {kept:.3f} >= 0.95 beside a filler replaying graphs")
    check(use >= 0.4, f"the graph-replaying filler's bubble use is {use:.3f} >= 0.4")


SERVER = ["--rate", "20", "--kernels", "4", "--kernel-us", "1000", "--warmup-seconds", "0.5"]


def with_online_round(env):
    """Training and the server under tandemd, without and with a filler: the ratios checked."""
    alone_train, alone_filler = exclusive(env)
    runs = []
    for filler in (False, True):
        d = env.daemon()
        t = env.start("train-sim", "--seconds", SECONDS, *TRAIN, role="training")
        s = env.start("infer-sim", "--seconds", SECONDS, "--seed", "7", *SERVER, role="inference")
        f = env.start("infer-sim", "--seconds", SECONDS, *FRAMEWORK, role="batch-inference") if filler else None
        runs.append((finish(t, timeout=60), finish(s, timeout=60), finish(f, timeout=60) if f else None))
        d.terminate()
        d.wait()
    (_, served, _), (train, served_filled, filled) = runs
    kept = train["iters_per_s"] / alone_train["iters_per_s"]
    use = bubble_use([filled], alone_filler, train)
    slowdown = served_filled["p50_ms"] / served["p50_ms"]
    print(f"training {kept:.3f} of Exclusive beside both; filler bubble use {use:.3f}; server p50/p95 "
          f"{served['p50_ms']:.1f}/{served['p95_ms']:.1f} ms without the filler, "
          f"{served_filled['p50_ms']:.1f}/{served_filled['p95_ms']:.1f} with it ({slowdown:.2f} x)")
    return kept, use, slowdown


def with_online(env, rounds=3):
    for r in range(1, rounds + 1):
        kept, use, slowdown = with_online_round(env)
        if kept >= 0.95 and use >= 0.3 and slowdown <= 1.5:
            break
    check(kept >= 0.95, f"training keeps {kept:.3f} >= 0.95 of Exclusive beside an online server and a filler")
    check(use >= 0.3, f"the filler beside the online server uses {use:.3f} >= 0.3 of the bubbles")
    check(slowdown <= 1.5, f"the server's p50 beside the filler is {slowdown:.2f} <= 1.5 x its p50 without it")


def flood_round(env):
    """Training beside the hostile fillers: (training's share of Exclusive, slowest status answer in s)."""
    alone_train = finish(env.start("train-sim", "--seconds", SECONDS, *TRAIN))
    d = env.daemon()
    t = env.start("train-sim", "--seconds", SECONDS, *TRAIN, role="training")
    # No host work between their launches: 8 spinning threads on a 2-core machine would measure
    # the CPU training lost, not the GPU. Their launches block at the gate. They stop launching
    # before training ends: once it has, nothing gates them and they would queue seconds of work.
    short = str(float(SECONDS) - 1)
    threads = env.start("infer-sim", "--seconds", short, "--threads", "8", "--no-sync", *FRAMEWORK[:4],
                        role="batch-inference")
    hog = env.start("infer-sim", "--seconds", short, "--mem-mb", "0", "--hog-memory", *FRAMEWORK[:4],
                    role="batch-inference")
    victim = env.start("infer-sim", "--seconds", "60", "--kernels", "1", "--kernel-us", "20000",
                       role="batch-inference")
    time.sleep(1.0)
    victim.send_signal(signal.SIGKILL)  # dies with its kernel queued or running
    victim.wait()
    answered = []
    for _ in range(10):
        t0 = time.monotonic()
        ok = env.status() is not None
        answered.append((ok, time.monotonic() - t0))
        time.sleep(0.1)
    kept = finish(t, timeout=60)["iters_per_s"] / alone_train["iters_per_s"]
    finish(threads, timeout=60)
    hogged = finish(hog, timeout=60)
    d.terminate()
    d.wait()
    slowest = max(s for _, s in answered)
    print(f"training {kept:.3f} of Exclusive; hog held {hogged.get('hogged_mb', 0)} MiB; status answered in "
          f"{slowest * 1e3:.0f} ms at most")
    check(all(ok for ok, _ in answered) and slowest < 2.0, f"tandemd answered every status ({slowest:.2f} s at most)")
    return kept


def flood(env, rounds=3):
    best = 0.0
    for _ in range(rounds):
        best = max(best, flood_round(env))
        if best >= 0.95:
            break
    check(best >= 0.95, f"training keeps {best:.3f} >= 0.95 of Exclusive beside 8 flooding threads, a memory hog "
          "and a killed filler (best round)")


def daemon_stalled(env):
    alone_train = finish(env.start("train-sim", "--seconds", SECONDS, *TRAIN))
    d = env.daemon()
    t = env.start("train-sim", "--seconds", SECONDS, *TRAIN, role="training")
    launching = float(SECONDS) - 2
    f = env.start("infer-sim", "--seconds", str(launching), *FRAMEWORK, "--no-sync", role="batch-inference")
    time.sleep(0.5)
    d.send_signal(signal.SIGSTOP)
    time.sleep(1.0)
    d.send_signal(signal.SIGCONT)
    kept = finish(t, timeout=60)["iters_per_s"] / alone_train["iters_per_s"]
    filler = finish(f, timeout=120)
    d.terminate()
    d.wait()
    drained = filler["elapsed_s"] - launching  # from its last launch until its queue had run
    print(f"training {kept:.3f} of Exclusive; the filler issued {filler['requests']} requests in {launching:.0f} s "
          f"and its queue ran {drained:.2f} s past that")
    check(drained < 0.5, f"the filler's queue stayed bounded through the stall (drained {drained:.2f} s < 0.5 s after "
          "its last launch)")
    check(kept >= 0.8, f"training keeps {kept:.3f} >= 0.8 of Exclusive across the stall (a second of it unmanaged)")


def main():
    build, case = sys.argv[1], sys.argv[2]
    env = Env(build)
    {"framework": framework, "fillers": fillers, "no-sync": no_sync, "long-kernel": long_kernel, "graphs": graphs,
     "with-online": with_online, "flood": flood, "daemon-stalled": daemon_stalled}[case](env)
    print(f"fill frameworks e2e {case}: ok")


if __name__ == "__main__":
    main()
