#!/usr/bin/env python3
"""CUDA_VISIBLE_DEVICES under tandem on two simulated GPUs: processes that see one physical GPU
under different ordinals share one tandemd GPU (by its UUID), and a process on the other GPU is
not gated beside the training job.

  training  train-sim with CUDA_VISIBLE_DEVICES=1: GPU 1 is its ordinal 0
  filler A  infer-sim --device 1, all GPUs visible: GPU 1 is its ordinal 1
  filler B  infer-sim with CUDA_VISIBLE_DEVICES=0: GPU 0, where nothing trains; it waits at its
            gate at most once, for tandemd's first period after it registers (a filler's gate
            starts closed until tandemd says its GPU has no training)

Nothing here depends on an instant: tandemd's view is polled until the three have registered
and filler B's gate is open.

usage: visible_devices_e2e.py BUILD_DIR
"""
import json
import os
import sys

from e2e_util import Env, check, finish, slots_by_pid


def main():
    env = Env(sys.argv[1])
    env.base["SIMGPU_DEVICES"] = "2"
    d = env.daemon()
    try:
        train = env.start("train-sim", "--seconds", "3", role="training", CUDA_VISIBLE_DEVICES="1")
        fill_a = env.start("infer-sim", "--seconds", "3", "--device", "1", role="batch-inference")
        fill_b = env.start("infer-sim", "--seconds", "3", role="batch-inference", CUDA_VISIBLE_DEVICES="0")
        procs = (train, fill_a, fill_b)
        # Once all three are registered and tandemd has opened B's gate (its first period after B).
        st = env.status_when(lambda s: {p.pid for p in procs} <= set(slots_by_pid(s)) and
                             slots_by_pid(s)[fill_b.pid]["gate"] == "open", procs)
        t, a, b = finish(train), finish(fill_a), finish(fill_b)
    finally:
        d.terminate()
        d.wait()
    check(st is not None, "tandemd saw the three registered, and filler B's gate open, while they ran")
    by_gpu = {g["uuid"]: {s["pid"] for s in g["slots"]} for g in st["gpus"]}
    print("tandemd's GPUs and their processes:", json.dumps({u[:8]: sorted(p) for u, p in by_gpu.items()}))
    check(len(by_gpu) == 2, "tandemd sees two GPUs")
    shared = [pids for pids in by_gpu.values() if train.pid in pids]
    check(len(shared) == 1 and shared[0] == {train.pid, fill_a.pid},
          "training (GPU 1 as ordinal 0) and filler A (GPU 1 as ordinal 1) share one tandemd GPU")
    check(any(pids == {fill_b.pid} for pids in by_gpu.values()), "filler B (GPU 0) is alone on the other GPU")

    def gate(p):
        with open(os.path.join(env.tmp, f"stats-{p.pid}.json")) as f:
            return json.load(f)["gate"]
    ga, gb = gate(fill_a), gate(fill_b)
    print(f"filler A: {a['requests']} requests, {ga['waits']} gate waits; "
          f"filler B: {b['requests']} requests, {gb['waits']} gate waits; training {t['iterations']} iterations")
    check(ga["waits"] > 0, "filler A, beside training, waits at the gate")
    check(gb["waits"] <= 1, "filler B, on the other GPU, waits at the gate at most once: until tandemd's first "
          f"period after it registered ({gb['waits']} waits, {gb['wait_ns'] / 1e6:.1f} ms)")
    check(b["requests"] > a["requests"], "filler B answers more requests than the gated filler A")
    print("visible devices e2e: ok")


if __name__ == "__main__":
    main()
