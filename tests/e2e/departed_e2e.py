#!/usr/bin/env python3
"""A process killed with SIGKILL writes no statistics file (TANDEM_STATS_FILE is written at exit);
what it launched is still reported by tandemd once it is gone (docs/metrics.md, "Departed
processes").

usage: departed_e2e.py BUILD_DIR CASE
  sigkill   train-sim (training) and infer-sim (batch inference) under libtandem launch kernels;
            once tandemd counts their launches both are killed with SIGKILL. Then
            `tandemctl status --json` lists them under "departed", the most recent first, with
            at least the launches seen while they lived; `tandemctl status` prints them in its
            departed section; the metrics page counts them by role
            (tandem_departed_processes_total, tandem_departed_launches_total,
            tandem_departed_gpu_work_completed_seconds_total) and, with promtool, still passes
            `promtool check metrics`; tandemd's log has a line for each, with its launches.
"""
import os
import re
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from e2e_util import check, ctl, metric_value, metrics_page, run_case, slots_by_pid  # noqa: E402


def case_sigkill(env):
    log = os.path.join(env.tmp, "tandemd.log")
    d = env.daemon("fill", metrics=True, log="info", log_file=log)
    try:
        train = env.start("train-sim", "--seconds", "60", role="training")
        filler = env.start("infer-sim", "--seconds", "60", role="batch-inference")
        procs = (train, filler)
        # Both registered and launching, and some of the filler's work completed (its kernels'
        # GPU time is estimated for its tokens; training's is not), as tandemd's view of their
        # pages says.
        def running(s):
            slots = slots_by_pid(s)
            return (all(slots.get(p.pid, {}).get("launches", 0) > 20 for p in procs) and
                    slots[filler.pid]["completed_ns"] > 0)
        live = env.status_when(running, procs, seconds=30)
        check(live is not None, "train-sim and infer-sim registered and their launches counted")
        before = {p.pid: slots_by_pid(live)[p.pid]["launches"] for p in procs}
        done_before = {p.pid: slots_by_pid(live)[p.pid]["completed_ns"] for p in procs}
        page = metrics_page(env)
        check(metric_value(page, "tandem_departed_processes_total", role="training") == 0,
              "no departed training process before the kill")
        # The order of the kills is the order of departure: the filler last, so listed first.
        for p in procs:
            p.send_signal(signal.SIGKILL)
            p.wait(timeout=10)
            time.sleep(0.2)
        check(not any(os.path.exists(os.path.join(env.tmp, f"stats-{p.pid}.json")) for p in procs),
              "the killed processes wrote no statistics file")
        gone = env.status_when(lambda s: {p.pid for p in procs} <= {x["pid"] for x in s.get("departed", [])}, seconds=10)
        check(gone is not None, "status --json lists both under departed")
        check(not set(before) & set(slots_by_pid(gone)), "and no longer in a GPU slot")
        departed = {x["pid"]: x for x in gone["departed"]}
        check([x["pid"] for x in gone["departed"][:2]] == [filler.pid, train.pid], "the most recent first")
        for p, role in ((train, "training"), (filler, "batch-inference")):
            x = departed[p.pid]
            check(x["role"] == role and x["launches"] >= before[p.pid] > 0,
                  f"pid {p.pid} ({role}): {x['launches']} launches departed, >= {before[p.pid]} seen while it lived")
            check(done_before[p.pid] <= x["completed_ns"] <= x["issued_ns"],
                  f"and its GPU work completed: {x['completed_ns']} ns, >= {done_before[p.pid]} seen while it lived")
            check(re.fullmatch("[0-9a-f]{32}", x["gpu"]) is not None and x["departed_s_ago"] >= 0,
                  "its GPU and when it left")
        check(departed[train.pid]["nccl_launches"] > 0, "training's collectives counted as nccl launches")

        text = ctl(env, "status")
        check(text.returncode == 0 and "departed (most recent first)" in text.stdout,
              "tandemctl status has a departed section")
        rows = text.stdout.split("departed (most recent first)")[1]
        check(all(re.search(rf"^\s+{p.pid}\s+{role}\s+{departed[p.pid]['launches']}\s", rows, re.M)
                  for p, role in ((train, "training"), (filler, "batch-inference"))),
              "with each killed process's pid, role and launches")

        page = metrics_page(env)
        for role, p in (("training", train), ("batch-inference", filler)):
            n = metric_value(page, "tandem_departed_processes_total", role=role)
            launched = metric_value(page, "tandem_departed_launches_total", role=role, kind="compute")
            work = metric_value(page, "tandem_departed_gpu_work_completed_seconds_total", role=role)
            check(n == 1 and launched == departed[p.pid]["launches"] > 0 and
                  abs(work - departed[p.pid]["completed_ns"] * 1e-9) < 1e-6,
                  f"metrics, role {role}: {n} departed, {launched} launches, {work} s of GPU work")
        check(metric_value(page, "tandem_departed_gpu_work_completed_seconds_total", role="batch-inference") > 0,
              "the filler's completed GPU work counted")
        check(metric_value(page, "tandem_process_launches_total", pid=train.pid) is None, "its per-process series are gone")
        promtool = shutil.which("promtool")
        if promtool:
            r = subprocess.run([promtool, "check", "metrics"], input=page, capture_output=True, text=True)
            remarks = (r.stdout + r.stderr).strip()[:300] or "no remarks"
            check(r.returncode == 0, f"promtool check metrics passes ({remarks})")
    finally:
        if d.poll() is None:
            d.send_signal(signal.SIGTERM)
            d.wait(timeout=10)
    with open(log) as f:
        text = f.read()
    for p in (train, filler):
        line = re.search(rf"client pid {p.pid} \(\S+\) departed after .*: (\d+) launches", text)
        check(line is not None and int(line.group(1)) == departed[p.pid]["launches"],
              f"tandemd's log names pid {p.pid} with its launches")


CASES = {"sigkill": case_sigkill}

if __name__ == "__main__":
    run_case(CASES)
