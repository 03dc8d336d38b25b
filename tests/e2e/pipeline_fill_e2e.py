#!/usr/bin/env python3
"""Pipeline-parallel training's bubbles filled (issue #38): examples/pytorch/pipeline.py as 2
stages of torch.distributed.pipelining (one simulated GPU each, NCCL point-to-point), each
TANDEM_ROLE=training under libtandem.so, with examples/pytorch/serve.py as a batch filler
(closed loop) on each GPU. A stage's forward and backward of a micro-batch are GPU time
(STAGE below); its bubbles are the pipeline's: the first stage waits in a receive for the
gradients between its last forward and its first backward, the last one for the activations
before its first forward and, at a step's end, for the first stage's backward.

The stages run from start to end (a paused stage would hold its neighbour in a receive); the
fillers' load is switched by their pause files and tandem by tandemd's presence (the harness of
torch_policy_e2e.py). First the fillers alone (their Exclusive rate), then in ROUNDS rounds of
windows: Exclusive (fillers paused, no tandemd), Co-Exec (fillers running, no tandemd), tandem
(policy fill, the default settings) and tandem with TANDEM_FILL_COMM=1. A stage's bubbles are
its receives' waits, and a receive is an NCCL point-to-point kernel (SendRecv) in flight:
tandemd sees them as bubbles (the launches queued behind the receive are not pending work,
src/hook/collective_waits.h), and since point-to-point kernels are told apart from collectives
(issue #38 item 2) fills them as ordinary bubbles by default; TANDEM_FILL_COMM only concerns
collectives, of which a pipeline has none. Before, the default held the fillers through every
receive as through a collective (fillers at most 0.003 of their Exclusive rate). Figures of a
configuration: training retained (stage 0's steps/s over Exclusive's of the same round), each
filler's share (its requests/s over its Exclusive rate), bubble use (the fillers' summed share
over the stages' summed idle share, 1 - steps/s x a step's GPU work), and under tandem the first
grant after a bubble's start (a 2 s tandemctl trace) and tandemctl status samples per GPU.

  gpipe|1f1b  under tandem (the default settings) training keeps >= 0.85 of Exclusive (issue
       goal 0.98, printed; best round); tandemd sees bubbles on each GPU (>= 10), reports the
       receives as point-to-point ("receiving", not "communicating") and grants in them (samples
       taken while a receive was in flight in a grant phase); each filler gets at least 0.006 of
       its Exclusive rate (best round; before, at most 0.003 by default; GPipe's last stage's
       filler only some), and the fillers use at least 0.12 of the bubbles (best round); Co-Exec
       costs training more than tandem (lowest Co-Exec round below the best tandem round). The
       TANDEM_FILL_COMM=1 arm is printed for comparison (it was the only way to fill them before).

Prints one JSON line per configuration and round (the columns of scripts/bench_fill.py).
usage: pipeline_fill_e2e.py BUILD_DIR gpipe|1f1b [ROUNDS]
"""
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from e2e_util import Env, check, free_port  # noqa: E402
from torch_e2e import require_torch  # noqa: E402
from torch_policy_e2e import SETTLE_S, Program, warmed_up, window, with_daemon  # noqa: E402

MICRO_BATCHES, FWD_MS, BWD_MS = 4, 6.0, 12.0
STAGE = ["--micro-batches", str(MICRO_BATCHES), "--fwd-ms", str(FWD_MS), "--bwd-ms", str(BWD_MS),
         "--kernel-ms", "1", "--warmup-steps", "3"]
STAGE_GPU_S = MICRO_BATCHES * (FWD_MS + BWD_MS) / 1e3  # a stage's GPU work a step (its large kernels)
FILLER = ["--gpu-ms", "2", "--kernel-ms", "1", "--warmup", "3"]
GRANTING = ("incremental", "stable")


def rate(program, w):
    return len(program.between(*w)) / (w[1] - w[0])


def start(env, schedule, stages, sharing="timeslice"):
    """The stages, warmed up and paused, then a filler on each GPU, warmed up and paused."""
    env.base.update(SIMGPU_DEVICES=str(stages), NCCL_DEBUG="WARN", SIMGPU_SHARING=sharing)
    group = {"WORLD_SIZE": str(stages), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}
    ranks = [Program(env, f"stage{r}", "pipeline.py", ["--log-steps", "--schedule", schedule, *STAGE], "training",
                     length=("--steps", "1000000"), RANK=str(r), LOCAL_RANK=str(r), **group) for r in range(stages)]
    warmed_up(ranks)
    # After the stages: a program sizes its kernels from their time as it starts (gpu_time.py).
    fillers = [Program(env, f"filler{g}", "serve.py", ["--log-requests", "--seed", str(g + 1), *FILLER],
                       "batch-inference", CUDA_VISIBLE_DEVICES=str(g)) for g in range(stages)]
    warmed_up(fillers)
    return ranks, fillers


def line(configuration, schedule, ranks, fillers, w, alone, filler_alone, seconds, **extra):
    """One configuration's figures in window `w` (scripts/bench_fill.py's columns)."""
    kept = rate(ranks[0], w) / alone if ranks else 1.0
    shares = [rate(f, w) / a for f, a in zip(fillers, filler_alone)]
    idle = [max(1e-3, 1.0 - rate(r, w) * STAGE_GPU_S) for r in ranks]
    return {"benchmark": "fill", "workload": "pipeline", "schedule": schedule, "stages": len(ranks),
            "configuration": configuration, "seconds": seconds, "training_retained": round(kept, 4),
            "filler_share": [round(s, 4) for s in shares], "filler_share_total": round(sum(shares), 4),
            "stage_idle": [round(i, 4) for i in idle],
            "bubble_use": round(sum(shares) / sum(idle), 4) if ranks and fillers else None, **extra}


# tandem's configurations: the default, which fills a receive's wait as an ordinary bubble, and
# TANDEM_FILL_COMM=1, which before issue #38 item 2 was needed to fill them (docs/scheduler.md,
# "Pipeline parallelism"); it now concerns collectives only, and a pipeline has none.
ARMS = (("tandem", {}), ("tandem TANDEM_FILL_COMM=1", {"TANDEM_FILL_COMM": "1"}))


def tandem_window(env, seconds, trace_s=2.0):
    """tandemctl's samples for `seconds`, and a trace of `trace_s` seconds from 1 s in: (the window
    that counts, the samples, the trace's events)."""
    path = os.path.join(env.tmp, f"trace-{time.monotonic_ns()}.json")
    tracer = None

    def sample():
        nonlocal tracer
        t0, samples = time.time(), []
        while time.time() < t0 + seconds:
            if tracer is None and time.time() > t0 + 1.0:
                tracer = subprocess.Popen([os.path.join(env.build, "bin", "tandemctl"), "trace", "--seconds",
                                           str(trace_s), "--out", path, "--socket", env.socket],
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            st = env.status()
            if st:
                samples.append(st["gpus"])
            time.sleep(0.02)
        return (t0 + SETTLE_S, time.time()), samples

    w, samples = sample()
    events = []
    if tracer is not None and tracer.wait(timeout=30) == 0 and os.path.exists(path):
        with open(path) as f:
            events = json.load(f)["traceEvents"]
    return w, samples, events


def first_grants(events):
    """Per GPU: the time from each bubble's start to the first grant in it (ms): p50, max, and
    how many bubbles had a grant of how many."""
    out = {}
    for gpu in sorted({e["pid"] for e in events}):
        grants = sorted(e["ts"] for e in events if e["pid"] == gpu and e["name"] == "tokens granted")
        bubbles = [e for e in events if e["pid"] == gpu and e["name"] == "bubble"]
        lat = sorted(next((g - b["ts"] for g in grants if b["ts"] <= g <= b["ts"] + b["dur"]), None)
                     for b in bubbles if any(b["ts"] <= g <= b["ts"] + b["dur"] for g in grants))
        out[gpu[4:16]] = {"p50_ms": round(lat[len(lat) // 2] / 1e3, 2) if lat else None,
                          "max_ms": round(lat[-1] / 1e3, 2) if lat else None,
                          "bubbles_granted": len(lat), "bubbles": len(bubbles)}
    return out


def measure(env, schedule, stages=2, rounds=2, seconds=6.0, out=sys.stdout, arms=ARMS):
    """Runs the configurations; returns the rounds' lines (also printed to `out`)."""
    ranks, fillers = start(env, schedule, stages)
    rounds_out = []
    try:
        for f in fillers:  # each filler alone: the stages are still paused after their warm-up
            f.run(True)
        w = window(seconds)
        filler_alone = [rate(f, w) for f in fillers]
        for f in fillers:
            f.run(False)
        print(json.dumps(line("Exclusive", schedule, [], fillers, w, 1.0, filler_alone, seconds)), file=out, flush=True)
        for r in ranks:
            r.run(True)
        for n in range(1, rounds + 1):
            w = window(seconds)
            alone = rate(ranks[0], w)
            got = {"Exclusive": line("Exclusive", schedule, ranks, [], w, alone, filler_alone, seconds,
                                     steps_per_s=round(alone, 3))}
            for f in fillers:
                f.run(True)
            got["Co-Exec"] = line("Co-Exec", schedule, ranks, fillers, window(seconds), alone, filler_alone, seconds)
            for name, settings in arms:
                w, samples, events = with_daemon(env, "fill", [*ranks, *fillers],
                                                 lambda: tandem_window(env, seconds), **settings)
                got[name] = line(name, schedule, ranks, fillers, w, alone, filler_alone, seconds,
                                 first_grant=first_grants(events), tandemd=gpu_view(samples))
            for f in fillers:
                f.run(False)
            for c, v in got.items():
                print(json.dumps(dict(v, round=n)), file=out, flush=True)
            rounds_out.append(got)
    finally:
        for p in [*ranks, *fillers]:
            p.kill()  # the stages: a SIGINT would reach them at different steps, one left in a receive
    return rounds_out


def gpu_view(samples):
    """Per GPU, from tandemctl's samples of one window: bubbles seen (the last count), the samples
    in a bubble, in a grant phase, with a collective in flight and with only a point-to-point kernel
    (a receive) in flight, and the fill phases counted while a receive was."""
    view = {}
    for gpus in samples:
        for g in gpus:
            v = view.setdefault(g["uuid"][:12], {"samples": 0, "bubble": 0, "granting": 0, "communicating": 0,
                                                 "receiving": 0, "phases_receiving": {}})
            v["samples"] += 1
            v["bubble"] += g["phase"] == "bubble"
            v["granting"] += g["fill_phase"] in GRANTING
            v["communicating"] += bool(g["communicating"])
            if g.get("receiving"):
                v["receiving"] += 1
                ph = v["phases_receiving"]
                ph[g["fill_phase"]] = ph.get(g["fill_phase"], 0) + 1
            v.update(bubbles=g["bubbles"], mean_bubble_ms=round(g["mean_bubble_ms"], 2),
                     mean_busy_ms=round(g["mean_busy_ms"], 2))
    return view


def main():
    build, schedule = sys.argv[1], sys.argv[2]
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    require_torch()
    env = Env(build)
    t0 = time.monotonic()
    results = measure(env, schedule, rounds=rounds)
    comm_name = ARMS[1][0]
    kept = max(r["tandem"]["training_retained"] for r in results)
    co = min(r["Co-Exec"]["training_retained"] for r in results)
    best = max(results, key=lambda r: r["tandem"]["bubble_use"])["tandem"]
    comm = max(results, key=lambda r: r[comm_name]["bubble_use"])[comm_name]
    print(f"training under tandem (default settings) keeps {kept:.3f} of Exclusive (issue goal 0.98; best round), "
          f"Co-Exec {co:.3f} (lowest round); under tandem the fillers' shares {best['filler_share']}, bubble use "
          f"{best['bubble_use']:.3f}, first grant after a bubble's start {json.dumps(best['first_grant'])} (best "
          f"round); with TANDEM_FILL_COMM=1 shares {comm['filler_share']}, bubble use {comm['bubble_use']:.3f}, "
          f"training {max(r[comm_name]['training_retained'] for r in results):.3f}")
    check(kept >= 0.85, f"training under tandem keeps {kept:.3f} >= 0.85 of Exclusive (best round)")
    gpus = sorted({g for r in results for g in r["tandem"]["tandemd"]})
    check(len(gpus) == 2, f"tandemd saw both stages' GPUs ({gpus})")
    for gpu in gpus:
        views = [r["tandem"]["tandemd"].get(gpu, {}) for r in results]
        bubbles = max(v.get("bubbles", 0) for v in views)
        receiving = max(v.get("receiving", 0) for v in views)
        in_receive = max(sum(v.get("phases_receiving", {}).get(p, 0) for p in GRANTING) for v in views)
        check(bubbles >= 10, f"tandemd saw the pipeline's bubbles on GPU {gpu} ({bubbles}, best round)")
        check(receiving > 0, f"and saw receives in flight as point-to-point ({receiving} samples, best round)")
        check(in_receive > 0, f"and by default granted its filler tokens while a receive was in flight "
              f"({in_receive} samples in a grant phase then, best round)")
    # Bubble use: 0.01-0.04 (GPipe) and 0.04-0.11 (1F1B) with bubbles predicted by their mean
    # (a GPipe first stage's 20 ms waits looked over after about 4 ms) and a simulated GPU that
    # let a stage keep the GPU through its waits; 0.317-0.387 and 0.511-0.560 since, in the
    # best rounds of two runs each. The floor is 0.12, three times the old GPipe figures.
    check(best["bubble_use"] >= 0.12, f"the fillers used {best['bubble_use']:.3f} >= 0.12 of the bubbles (best "
          f"round; 0.01-0.11 with bubbles predicted by their mean)")
    # Each filler's floor is twice what it got before point-to-point was told from collectives
    # (0.003). GPipe's last stage is the exception: tandemd sees its idle time in 4-5 ms pieces
    # (docs/scheduler.md, "Pipeline parallelism"), and its filler got 0.005-0.02 of its rate in
    # the best rounds, so there it need only have got something done.
    for g in range(len(best["filler_share"])):
        share = max(r["tandem"]["filler_share"][g] for r in results)
        floor = 0.0 if schedule == "gpipe" and g == len(best["filler_share"]) - 1 else 0.006
        check(share > floor, f"filler {g} got work done under tandem's default settings ({share:.3f} > {floor} of "
              f"its Exclusive rate, best round; at most 0.003 before point-to-point was told from collectives)")
    check(co < kept, f"Co-Exec costs training more than tandem ({co:.3f} < {kept:.3f})")
    print(f"pipeline fill e2e {schedule}: ok ({time.monotonic() - t0:.0f} s)")


if __name__ == "__main__":
    main()
