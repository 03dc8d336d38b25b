#!/usr/bin/env python3
"""NCCL under tandem on the simulated GPUs: 2 training ranks, one GPU each, with tandemd.

usage: nccl_e2e.py BUILD_DIR straggler
  straggler  simgpu_nccl's straggler loop (20 steps of 10 ms compute and an all_reduce; rank 1
             40 ms late to each) under libtandem.so with TANDEM_ROLE=training: every rank's
             statistics count its NCCL kernels as NCCL (21: a barrier and 20 all_reduces) and
             its compute kernels apart (20), nothing waited at a gate, each registered once;
             tandemd sees rank 0's GPU idle while its collective waits for rank 1 (bubbles of
             about 40 ms between busy periods of about 10 ms, and the communication phase).
"""
import glob
import json
import os
import sys
import time

from e2e_util import Env, check


def straggler(env):
    env.base.update(SIMGPU_DEVICES="2", NCCL_DEBUG="WARN")
    d = env.daemon()
    p = env.start("simgpu_nccl", "straggler", role="training")
    phases = {}  # uuid -> fill phases seen
    latest = {}  # uuid -> the GPU as tandemd last showed it
    while p.poll() is None:
        s = env.status()
        if s and s["gpus"]:
            for g in s["gpus"]:
                latest[g["uuid"]] = g
                phases.setdefault(g["uuid"], set()).add(g["fill_phase"])
        time.sleep(0.02)
    out, err = p.communicate(timeout=10)
    # Each GPU as last seen while the ranks ran: tandemd forgets a GPU's state once no process
    # uses it (docs/security.md, daemon limits).
    d.terminate()
    d.wait()
    check(p.returncode == 0, f"both ranks finished their steps (exit {p.returncode}): {err[-1500:]}")
    stats = [json.load(open(f)) for f in glob.glob(os.path.join(env.tmp, "stats-*.json"))]
    check(len(stats) == 2, f"each rank wrote its statistics ({len(stats)} files)")
    for s in stats:
        l = s["launches"]
        check(l["nccl"] == 21 and l["total"] == 41,
              f"pid {s['pid']}: {l['nccl']} NCCL kernels of {l['total']} (a barrier and 20 all_reduces, 20 compute)")
        check(s["gate"]["waits"] == 0 and s["gate"]["fail_open"] == 0, f"pid {s['pid']}: no launch waited at a gate")
        check(s["daemon"]["links"] == 1, f"pid {s['pid']}: registered with tandemd once")
    gpus = sorted(latest.values(), key=lambda g: g["uuid"])  # GPU 0 (rank 0) first
    check(len(gpus) == 2, f"tandemd saw {len(gpus)} GPUs")
    g0 = gpus[0]
    print(f"GPU 0: {g0['bubbles']} bubbles, mean {g0['mean_bubble_ms']:.1f} ms, busy mean {g0['mean_busy_ms']:.1f} ms; "
          f"phases seen {sorted(phases.get(g0['uuid'], []))}")
    check(g0["bubbles"] >= 10 and 25 <= g0["mean_bubble_ms"] <= 80,
          "rank 0's waits for rank 1 are bubbles of about 40 ms")
    check(5 <= g0["mean_busy_ms"] <= 30, "between busy periods of about 10 ms (the compute)")
    check("communication" in phases.get(g0["uuid"], set()), "and tandemd saw the collective as communication")


if __name__ == "__main__":
    build, case = sys.argv[1], sys.argv[2]
    {"straggler": straggler}[case](Env(build))
