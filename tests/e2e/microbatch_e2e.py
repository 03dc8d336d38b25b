#!/usr/bin/env python3
"""examples/pytorch/tandem_microbatch.py (SIRIUS's instant adjustment: micro-batches that give
memory back) with real PyTorch on the simulated GPU. The training process is
tests/e2e/microbatch_probe.py: its model computes on the CPU (the simulator runs no kernels) and
holds its activations in GPU memory, 12 MiB per sample and layer, 8 samples a step, k = 2.

  plain     without libtandem: a plain gradient accumulator (k = 1, 2, 3, 8) whose parameters
            after 14 steps equal full-batch training's (relative 1e-5)
  pressure  under libtandem beside tandemd: tandemctl lowers the quota under what the process
            holds in the middle of a forward (96 MiB held, quota 64 MiB; later 48 held, 40),
            the runner discards the running micro-batch, empties the cache, reports the release
            and doubles k (2 -> 4 -> 8); the quota raised to 80 MiB brings k back to 4, cleared
            (`none`) to 2; the parameters equal full-batch training's; lowered between steps,
            the callback empties the cache itself. Prints the time from the quota's change to
            the reported release.
  oom       TANDEM_MEM_LIMIT=64M from the start: the first micro-batch's allocation fails, the
            runner discards it and goes on with k = 4, exactly
  library-oom  examples/pytorch/train.py --micro-batches 1 (a GPU model: cuBLAS) with a batch of
            640 under TANDEM_MEM_LIMIT=512M: the first micro-batch's activations fill the quota
            and cuBLAS fails to allocate its handle for the backward (a RuntimeError, not an
            OutOfMemoryError); the runner takes it for out-of-memory, discards and trains with
            k = 2 instead of failing
  regrow-oom  k = 1 asked, TANDEM_MEM_LIMIT=256M: the forward of a whole batch fits (192 MiB)
            but its backward takes 128 MiB more, so k = 1 runs out of memory and k = 2 runs.
            The runner estimates a sample's memory from the forward, so it would regrow to
            k = 1 after every calm step and run out of memory again (as train.py did on an H200
            beside a server: 278 times in 560 steps); an out-of-memory is evidence of what a
            sample needs, so it runs out of memory once and stays at k = 2
  ddp       two ranks (gloo, CPU tensors) under libtandem: rank 1's quota is lowered in a
            forward; rank 1 shrinks in that step, both ranks run its k from the next step on
            (they agree before every step), regrow together once it is cleared, and end with
            identical parameters equal to full-batch training on the whole global batch

usage: microbatch_e2e.py BUILD_DIR CASE
"""
import json
import os
import queue
import statistics
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(__file__))
from e2e_util import Env, check, ctl, free_port, mem_row, preload, stats_file, wait_for  # noqa: E402
from torch_e2e import PYTHON, ROOT, require_torch  # noqa: E402

PROBE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "microbatch_probe.py")
MIB = 1 << 20
TOLERANCE = 1e-5  # relative, float32: the summation order changes with k


class Probe:
    """microbatch_probe.py running; its JSON lines through a queue (read by a thread)."""

    def __init__(self, env, args, tandem=True, name="probe", **settings):
        e = dict(env.base, **settings)
        if tandem:
            e.update(LD_PRELOAD=preload(env.build), TANDEM_ROLE="training",
                     TANDEM_STATS_FILE=os.path.join(env.tmp, "stats-%p.json"))
        self.name = name
        self.stderr_path = os.path.join(env.tmp, f"{name}.err")
        self.p = env.popen([PYTHON, PROBE, ROOT, *args], env=e, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                           stderr=open(self.stderr_path, "w"), text=True)
        self.lines = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.p.stdout:
            if line.startswith("{"):
                self.lines.put(json.loads(line))
        self.lines.put(None)

    def next(self, timeout=90):
        try:
            ev = self.lines.get(timeout=timeout)
        except queue.Empty:
            ev = None
        if ev is None:
            self.p.poll()
            with open(self.stderr_path) as f:
                err = f.read()[-3000:]
            raise SystemExit(f"FAIL: {self.name} (pid {self.p.pid}) ended or went silent "
                             f"(exit {self.p.returncode}):\n{err}")
        return ev

    def expect(self, event, timeout=90):
        while True:
            ev = self.next(timeout)
            if ev["event"] == event:
                return ev

    def go(self):
        self.p.stdin.write("go\n")
        self.p.stdin.flush()


def set_quota(env, pid, size):
    """tandemctl mem --set; the CLOCK_MONOTONIC time just before it ran."""
    t = time.monotonic_ns()
    r = ctl(env, "mem", "--set", str(pid), size)
    check(r.returncode == 0, f"tandemctl mem --set {pid} {size}: {r.stdout.strip()} {r.stderr.strip()}")
    return t


def latencies(events, lowered):
    """(phase, ms to tandem's call, ms to the release reported) for each lowering of the quota
    (CLOCK_MONOTONIC times), from the first adjustment after it."""
    out = []
    for t in sorted(lowered.values()):
        mine = [e for e in events if e["pressure_ns"] >= t]
        if mine:
            out.append((mine[0]["phase"], (mine[0]["pressure_ns"] - t) / 1e6, (mine[0]["released_ns"] - t) / 1e6))
    return out


def print_latencies(lat):
    for label, rows in (("in a step", [x for x in lat if x[0] != "idle"]),
                        ("between steps", [x for x in lat if x[0] == "idle"])):
        if rows:
            called, released = [c for _, c, _ in rows], [r for _, _, r in rows]
            print(f"{label}: quota lowered -> callback ms: " + " ".join(f"{c:.1f}" for c in called) +
                  f" (p50 {statistics.median(called):.1f}, max {max(called):.1f}); -> release reported ms: " +
                  " ".join(f"{r:.1f}" for r in released) +
                  f" (p50 {statistics.median(released):.1f}, max {max(released):.1f})")


def plain_case(env):
    probe = Probe(env, ["--ks", "1,2,3,8"], tandem=False)
    r = probe.expect("result")
    print("runs:", json.dumps(r["runs"]))
    for k, run in r["runs"].items():
        check(not run["tandem"], f"k={k}: without libtandem the runner registers no callback")
        check(run["micro_batches"] == 14 * int(k), f"k={k}: 14 steps of {k} micro-batches ({run['micro_batches']})")
        check(run["diff"] <= TOLERANCE, f"k={k}: parameters equal full-batch training's (relative {run['diff']:.2e})")


def pressure_case(env):
    env.daemon()
    probe = Probe(env, ["--steps", "16", "--pause-at", "2,5", "--sync-after", "8,11,15", "--pause-in-backward", "13"])
    ready = probe.expect("ready")
    pid = ready["pid"]
    check(ready["tandem"], "the runner registered its memory-pressure callback with libtandem")
    check(wait_for(lambda: mem_row(env, pid), seconds=20), "the process is registered with tandemd")
    lowered, lower_to = {}, {2: "64M", 5: "40M", 13: "64M"}
    steps = {}
    while True:
        ev = probe.next()
        if ev["event"] in ("forward", "backward"):
            lowered[ev["step"]] = set_quota(env, pid, lower_to[ev["step"]])
        elif ev["event"] == "pressure_seen":
            check(ev["pending"], f"step {ev['step']}: tandem called the runner's callback during the {ev['where']}")
        elif ev["event"] == "step":
            steps[ev["step"]] = ev
        elif ev["event"] == "sync" and ev["step"] == 15:
            # Between steps: the callback, on tandem's thread, empties the cache itself.
            held = mem_row(env, pid)["bytes_in_use"]
            lowered[15] = set_quota(env, pid, "16M")
            check(held > 16 * MIB and wait_for(lambda: mem_row(env, pid)["bytes_in_use"] <= 16 * MIB),
                  f"lowered to 16 MiB between steps, the process gave back its cache ({held // MIB} MiB held)")
            probe.go()
        elif ev["event"] == "sync":
            size = {8: "80M", 11: "none"}[ev["step"]]
            set_quota(env, pid, size)
            check(wait_for(lambda: (r := mem_row(env, pid)) and
                           r["quota_bytes"] == (0 if size == "none" else 80 * MIB)), f"the quota is now {size}")
            probe.go()
        elif ev["event"] == "result":
            r = ev
            break
    probe.p.wait(timeout=30)
    print("k per step:", r["ks"])
    print("events:", json.dumps(r["events"]))
    print("stats:", json.dumps(r["stats"]))
    s = r["stats"]
    running = [e for e in r["events"] if e["phase"] in ("forward", "backward")]
    check([(e["step"], e["phase"], e["discarded"]) for e in running] ==
          [(2, "forward", True), (5, "forward", True), (13, "backward", True)],
          f"the micro-batch running when the quota was lowered was discarded, each time (in the forward twice, "
          f"then in the backward, after some of its gradients were computed): {running}")
    check(s["discarded"] == 3 and s["discarded_samples"] == 4 + 2 + 4, f"4, 2 and 4 samples discarded ({s})")
    check(running[0]["freed"] >= 64 * MIB and running[1]["freed"] >= 40 * MIB and running[2]["freed"] >= 64 * MIB,
          "the cache was emptied: " + ", ".join(f"{e['freed'] // MIB}" for e in running) + " MiB released")
    check(r["ks"][:3] == [2, 2, 2] and r["ks"][3:9] == [4, 4, 4, 8, 8, 8],
          f"k doubled after each lowering, 2 -> 4 -> 8 ({r['ks']})")
    check(r["ks"][9:12] == [4, 4, 4], "with the quota raised to 80 MiB, k regrew to 4 (8 samples of 24 MiB "
          "would not fit) and stayed there")
    check(r["ks"][12:14] == [2, 2] and s["regrows"] == 2, "with the quota cleared, k regrew to 2")
    check(r["ks"][14:] == [4, 4], "lowered again in a backward, k went to 4")
    idle = [e for e in r["events"] if e["phase"] == "idle"]
    check(len(idle) == 1 and idle[0]["freed"] > 16 * MIB, f"the release between steps came from the callback: {idle}")
    check(steps[2]["micro_batches"] == 4 and steps[5]["micro_batches"] == 8 and steps[13]["micro_batches"] == 4,
          "the discarded micro-batch's samples ran again: the steps ran 4 x 2, 8 x 1 and 4 x 2 samples")
    check(r["diff"] <= TOLERANCE, f"the parameters equal full-batch training's (relative {r['diff']:.2e})")
    m = stats_file(env, pid)["memory"]
    check(m["quota_refusals"] == 0, "no allocation was refused: the runner gave memory back before it was needed")
    check(m["pressure_calls"] >= 3 and m["reported_release_bytes"] == s["released_bytes"] > 0,
          f"tandem counted the calls and the releases reported: {m['pressure_calls']} calls, "
          f"{m['reported_release_bytes'] // MIB} MiB")
    lat = latencies(r["events"], lowered)
    check([phase for phase, _, _ in lat] == ["forward", "forward", "backward", "idle"] and
          all(rel < 5000 for _, _, rel in lat), f"each release came within 5 s of the lowering: {lat}")
    print_latencies(lat)


def oom_case(env):
    probe = Probe(env, ["--steps", "6"], TANDEM_MEM_LIMIT="64M")
    r = probe.expect("result")
    probe.p.wait(timeout=30)
    print("k per step:", r["ks"], "events:", json.dumps(r["events"]))
    s = r["stats"]
    check(s["ooms"] == 1 and s["discarded"] == 1, f"the first micro-batch ran out of memory and was discarded ({s})")
    check(r["ks"] == [2] + [4] * 5, f"k went to 4 and stayed ({r['ks']})")
    check(r["diff"] <= TOLERANCE, f"the parameters equal full-batch training's (relative {r['diff']:.2e})")
    m = stats_file(env, r["pid"])["memory"]
    check(m["quota_refusals"] >= 1, f"tandem refused the allocation ({m['quota_refusals']} refusals)")


def library_oom_case(env):
    p = subprocess.run([PYTHON, os.path.join(ROOT, "examples", "pytorch", "train.py"), "--steps", "3", "--replays",
                        "0", "--batch", "640", "--dim", "128", "--micro-batches", "1"],
                       env=dict(env.base, LD_PRELOAD=preload(env.build), TANDEM_MEM_LIMIT="512M",
                                TANDEM_STATS_FILE=os.path.join(env.tmp, "stats-%p.json")),
                       capture_output=True, text=True, timeout=240)
    check(p.returncode == 0, f"training ran every step ({p.returncode}: {p.stderr[-1500:]})")
    r = json.loads([l for l in p.stdout.splitlines() if l.startswith("{")][-1])
    s = r["micro_batches"]
    print("runner:", json.dumps(s), "k", r["k"])
    check(s["ooms"] >= 1 and s["discarded"] >= 1 and r["k"] >= 2,
          f"an allocation failure in the backward was taken for out-of-memory: discarded, k {r['k']} ({s})")


def regrow_oom_case(env):
    probe = Probe(env, ["--steps", "10", "--k", "1", "--backward-mib-per-sample", "16"], TANDEM_MEM_LIMIT="256M")
    r = probe.expect("result")
    probe.p.wait(timeout=30)
    s = r["stats"]
    print("k per step:", r["ks"], "runner:", json.dumps(s))
    check(s["ooms"] == 1, f"one out-of-memory, not one each time k regrew ({s['ooms']} in {len(r['ks'])} steps)")
    check(r["ks"][1:] == [2] * 9, f"k stayed 2 once k = 1 had run out of memory ({r['ks']})")
    check(r["diff"] <= TOLERANCE, f"the parameters equal full-batch training's (relative {r['diff']:.2e})")


def ddp_case(env):
    env.daemon()
    port = str(free_port())
    # Rank 1 pauses in step 2's first forward (its quota is lowered then) and after step 5 (cleared).
    ranks = [Probe(env, ["--steps", "8", *(["--pause-at", "2", "--sync-after", "5"] if rank else [])],
                   name=f"rank{rank}",
                   RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=port,
                   GLOO_SOCKET_IFNAME="lo")
             for rank in range(2)]
    pids = [rank.expect("ready", timeout=120)["pid"] for rank in ranks]
    check(wait_for(lambda: all(mem_row(env, pid) for pid in pids), seconds=20), "both ranks are registered")
    results = [None, None]

    def rank0():
        results[0] = ranks[0].expect("result", timeout=110)

    t = threading.Thread(target=rank0)
    t.start()
    lowered = {}
    while True:
        ev = ranks[1].next()
        if ev["event"] == "forward":
            lowered[ev["step"]] = set_quota(env, pids[1], "64M")
        elif ev["event"] == "sync":
            set_quota(env, pids[1], "none")
            check(wait_for(lambda: (r := mem_row(env, pids[1])) and r["quota_bytes"] == 0), "rank 1's quota is cleared")
            ranks[1].go()
        elif ev["event"] == "result":
            results[1] = ev
            break
    t.join(timeout=120)
    check(results[0] is not None, "rank 0 finished")
    for rank, r in enumerate(results):
        print(f"rank {rank}: k per step {r['ks']}, stats {json.dumps(r['stats'])}")
    r0, r1 = results
    check(r1["stats"]["discarded"] == 1 and r1["stats"]["shrinks"] == 1 and r0["stats"]["discarded"] == 0,
          "rank 1 discarded its running micro-batch when its quota was lowered; rank 0 had no pressure")
    check(r0["ks"] == r1["ks"] == [2, 2, 2, 4, 4, 4, 2, 2],
          f"both ranks ran the same k every step: rank 1's from the step after its shrink, regrown together "
          f"after its quota was cleared ({r0['ks']} / {r1['ks']})")
    check(r0["stats"]["followed"] == 1, "rank 0 took k = 4 from rank 1 through the agreement")
    check(r0["digest"] == r1["digest"], "the ranks' parameters are identical")
    check(r0["diff"] <= TOLERANCE and r1["diff"] <= TOLERANCE,
          f"and equal full-batch training's on the global batch (relative {r0['diff']:.2e})")
    print_latencies(latencies(r1["events"], lowered))


def main():
    build, case = sys.argv[1], sys.argv[2]
    require_torch()
    env = Env(build)
    t0 = time.monotonic()
    try:
        {"plain": plain_case, "pressure": pressure_case, "oom": oom_case, "library-oom": library_oom_case,
         "regrow-oom": regrow_oom_case,
         "ddp": ddp_case}[case](env)
    finally:
        env.kill_started()
    print(f"microbatch e2e {case}: ok ({time.monotonic() - t0:.0f} s)")


if __name__ == "__main__":
    main()
