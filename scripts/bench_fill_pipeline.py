"""The fill benchmark with pipeline-parallel training (scripts/bench_fill.py --workload pipeline):
examples/pytorch/pipeline.py as STAGES stages of torch.distributed.pipelining (GPipe or 1F1B,
4 micro-batches; a micro-batch's forward 6 ms and backward 12 ms of GPU time on each stage),
one simulated GPU each, all TANDEM_ROLE=training, and examples/pytorch/serve.py as a batch
filler (closed loop, 2 ms of GPU work a request) on each GPU. The harness is
tests/e2e/pipeline_fill_e2e.py's: the fillers alone first (their Exclusive rate), then per
round Exclusive (fillers paused, no tandemd), Co-Exec (time slicing, no tandemd), tandem
(policy fill, the default settings: the receives' waits filled as ordinary bubbles) and tandem
with TANDEM_FILL_COMM=1 (before point-to-point kernels were told from collectives, the only way
to fill them; it now concerns collectives only).

One JSON line per configuration and round: training_retained (stage 0's steps/s over
Exclusive's of the same round), filler_share (each filler's requests/s over its Exclusive
rate), bubble_use (the fillers' summed share over the stages' summed idle share, 1 - steps/s x
a step's GPU work), and under tandem first_grant (per GPU, from a 2 s tandemctl trace: the time
from a bubble's start to its first grant, p50 and max, and how many bubbles had one) and
tandemd (per GPU, from tandemctl status samples: bubbles seen, samples in a bubble, in a grant
phase, with a collective in flight, with only a receive in flight, and the fill phases then).
"""
import contextlib
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "e2e"))
from e2e_util import Env  # noqa: E402
import pipeline_fill_e2e as harness  # noqa: E402
from torch_e2e import require_torch  # noqa: E402


def main(build, seconds, schedule="gpipe", stages=2, rounds=2):
    """The benchmark's JSON lines on the standard output; the harness's progress on stderr."""
    require_torch()
    env = Env(build)
    out = sys.stdout
    with contextlib.redirect_stdout(sys.stderr):
        harness.measure(env, schedule, stages=stages, rounds=rounds, seconds=seconds, out=out)
    return 0
