"""The fill benchmark with real PyTorch programs (scripts/bench_fill.py --workload pytorch):
examples/pytorch/train.py as the training job (60 ms of GPU work and 30 ms of data loading a
step, as in tests/e2e/torch_policy_e2e.py) and 1, 2 or 4 copies of examples/pytorch/serve.py
as batch fillers (closed loop, 4 ms of GPU work a request), on the simulated GPU (or on the
system's driver with --real: a real GPU, without the MPS configuration).

Configurations, each a window of SECONDS: Exclusive (each program alone), Co-Exec with time
slicing (the simulator's default, a GPU without MPS), Co-Exec with MPS (SIMGPU_SHARING=mps),
and tandem (policy fill, on the time-sliced GPU). Loading cuBLAS costs each process seconds of
CPU, so the programs start once per sharing mode (train.py and four fillers, a mode being a
process's setting; one after the other, each warmed up before the next starts) and the
configurations are switched while they run: a program's load by its pause file, tandem by
tandemd's presence (the harness of the PyTorch policy tests); four fillers are measured
first, then two (the other two have exited), then one.

Figures per configuration and number of fillers, one JSON line each: training's throughput
over its Exclusive throughput (retained), each filler's throughput over one filler's
Exclusive throughput (filler_share), SpecInF's bubble use (the fillers' summed share over the
share of time training leaves the GPU idle, 1 - steps/s x 60 ms), and the fillers' request
latency p50/p95 (pooled). The Exclusive figures are measured again in each sharing mode's
processes; ratios are taken within a mode.
"""
import contextlib
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "e2e"))
from e2e_util import Env  # noqa: E402
import torch_policy_e2e as harness  # noqa: E402
from torch_e2e import require_torch  # noqa: E402

FILLERS = (1, 2, 4)


def rate(program, w):
    return len(program.between(*w)) / (w[1] - w[0])


def percentile(ms, q):
    ms = sorted(ms)
    return round(ms[min(len(ms) - 1, int(q * len(ms)))], 2) if ms else None


class Reporter:
    """Prints one JSON line per configuration, its ratios against the Exclusive figures of the
    same processes, to the standard output the harness's own messages do not go to."""

    def __init__(self, out, sharing, seconds):
        self.out, self.sharing, self.seconds = out, sharing, seconds
        self.steps = self.filler = None  # Exclusive: training's steps/s, one filler's requests/s

    def line(self, configuration, train, fillers, w):
        """`train` and `fillers` (Programs) in the window `w`."""
        kept = rate(train, w) / self.steps if train else 1.0
        shares = [rate(f, w) / self.filler for f in fillers]
        latencies = [r["ms"] for f in fillers for r in f.between(*w)]
        idle = 1.0 - kept * self.steps * harness.TRAIN_GPU_S
        print(json.dumps({
            "benchmark": "fill", "workload": "pytorch", "configuration": configuration, "sharing": self.sharing,
            "fillers": len(fillers), "seconds": self.seconds, "training_retained": round(kept, 4),
            "filler_share": [round(s, 4) for s in shares], "filler_share_total": round(sum(shares), 4),
            "bubble_use": round(sum(shares) / idle, 4) if train and idle > 0.01 else None,
            "filler_p50_ms": percentile(latencies, 0.5), "filler_p95_ms": percentile(latencies, 0.95)}),
            file=self.out, flush=True)


def run_mode(env, out, sharing, seconds, with_tandem):
    """Starts the programs with SIMGPU_SHARING=`sharing`, prints Exclusive, then Co-Exec (and
    tandem when `with_tandem`) for each number of fillers."""
    env.base["SIMGPU_SHARING"] = sharing
    programs = []
    report = Reporter(out, sharing, seconds)
    try:
        # One after the other: a program sizes its kernels from their GPU time as it starts
        # (examples/pytorch/gpu_time.py), which another's warm-up on the GPU would lengthen (a
        # filler sized so beside three others ran 2.5 times as many requests as the first).
        # Those warmed up wait, paused, with the GPU idle.
        programs.append(harness.Program(env, f"train-{sharing}", "train.py", ["--log-steps", *harness.TRAIN],
                                        "training"))
        harness.warmed_up(programs[-1:])
        for i in range(max(FILLERS)):
            programs.append(harness.Program(env, f"filler{i}-{sharing}", "serve.py",
                                            ["--log-requests", "--seed", str(i + 1), *harness.FILLER],
                                            "batch-inference"))
            harness.warmed_up(programs[-1:])
        train, fillers = programs[0], programs[1:]
        train.run(True)
        report.steps = rate(train, harness.window(seconds))
        train.run(False)
        fillers[0].run(True)
        w = harness.window(seconds)
        report.filler = rate(fillers[0], w)
        fillers[0].run(False)
        report.line("Exclusive", None, fillers[:1], w)
        train.run(True)
        label = "Co-Exec MPS" if sharing == "mps" else "Co-Exec time slicing"
        # Most fillers first: a filler no longer measured exits, since tandemd gives every
        # registered filler, idle or not, an equal share of each bubble (docs/scheduler.md).
        for n in sorted(FILLERS, reverse=True):
            for f in fillers[n:]:
                f.kill()
            active = fillers[:n]
            for f in active:
                f.run(True)
            report.line(label, train, active, harness.window(seconds))
            if with_tandem:
                w = harness.with_daemon(env, "fill", [train, *active], lambda: harness.window(seconds))
                report.line("tandem", train, active, w)
            for f in active:
                f.run(False)
    finally:
        for p in programs:
            p.kill()


def main(build, seconds, real=False):
    """The benchmark's JSON lines on the standard output; the harness's progress on stderr.
    `real`: on the system's driver (a real GPU, as it is set up: "timeslice" then names the
    GPU's own sharing), without the simulator's MPS configuration."""
    require_torch()
    if real:
        os.environ["TANDEM_E2E_REAL_DRIVER"] = "1"
    env = Env(build)
    out = sys.stdout
    with contextlib.redirect_stdout(sys.stderr):
        run_mode(env, out, "timeslice", seconds, with_tandem=True)
        if not real:
            run_mode(env, out, "mps", seconds, with_tandem=False)
    return 0
