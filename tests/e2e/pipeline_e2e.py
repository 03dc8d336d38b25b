#!/usr/bin/env python3
"""PyTorch pipeline parallelism (torch.distributed.pipelining) on the simulated GPUs, without
tandem: pipeline_probe.py as STAGES processes, one simulated GPU each, NCCL backend, in a
namespace of their own (e2e_util.Env).

  SCHEDULE [STAGES]  (gpipe or 1f1b; 2 stages unless given) every rank finishes its steps (each
       waits for its inputs and output gradients over NCCL's point-to-point); a tensor sent by dist.send arrives equal; every activation a stage
       received is the one its predecessor sent; rank 0 sleeps DELAY_MS before each step and
       the last stage's steps together take at least 0.9 x as long (it waits for its inputs,
       as on a GPU).

usage: pipeline_e2e.py BUILD_DIR gpipe|1f1b [STAGES]
"""
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from e2e_util import Env, check, free_port, last_json  # noqa: E402
from torch_e2e import PYTHON, require_torch  # noqa: E402

PROBE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "pipeline_probe.py")
STEPS, DELAY_MS, MICROBATCHES = 4, 150, 4


def main():
    build, schedule = sys.argv[1], sys.argv[2]
    stages = int(sys.argv[3]) if len(sys.argv) > 3 else 2
    require_torch()
    env = Env(build)
    port = free_port()
    ranks = []
    for rank in range(stages):
        e = dict(env.base, SIMGPU_DEVICES=str(stages), RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(stages),
                 MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), NCCL_DEBUG="WARN")
        ranks.append(env.popen([PYTHON, PROBE, schedule, str(STEPS), str(DELAY_MS)], env=e, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True))
    # A failed rank leaves its peers waiting for it (60 s per transfer): stop at the first.
    deadline = time.time() + 150
    while any(p.poll() is None for p in ranks):
        failed = [r for r, p in enumerate(ranks) if p.poll() not in (None, 0)]
        if failed or time.time() > deadline:
            for p in ranks:
                p.kill()
            rank = failed[0] if failed else -1
            err = ranks[rank].stderr.read() if failed else ""
            raise SystemExit(f"FAIL: rank {rank} failed or 150 s passed: {err[-3000:]}")
        time.sleep(0.1)
    results = []
    for rank, p in enumerate(ranks):
        out, err = p.communicate()
        check(p.returncode == 0, f"rank {rank} exits 0 (got {p.returncode}): {err[-3000:]}")
        results.append(last_json(out))
    for r in results:
        print(f"rank {r['rank']}: {r['steps']} steps in {r['seconds'] * 1e3:.0f} ms "
              f"({', '.join(f'{s * 1e3:.0f}' for s in r['step_s'])} ms), {r['activations']} activations received")
    for r in results[1:]:
        check(r["activations"] == (STEPS + 1) * MICROBATCHES,
              f"rank {r['rank']} received every activation ({r['activations']})")
        check(not r["bad"], f"rank {r['rank']}'s activations are the ones its predecessor sent (wrong: {r['bad']})")
    last = results[-1]
    check(last["seconds"] >= 0.9 * STEPS * DELAY_MS / 1e3,
          f"the last stage waits for rank 0's late steps ({last['seconds'] * 1e3:.0f} ms >= 0.9 x {STEPS} x {DELAY_MS} ms)")
    print(f"PASS: {schedule}, {stages} stages")


if __name__ == "__main__":
    main()
