#!/usr/bin/env python3
"""`tandemctl top` under a pseudo-terminal (python's pty module), against tandemd, train-sim
(training) and infer-sim (batch inference) on the simulated GPU. One case per behaviour:
  screen        the GPU row and both process rows with their roles appear; q exits 0, the
                terminal's settings (echo, canonical mode) are as before and the alternate
                screen was left, the cursor shown again
  signal        SIGTERM, SIGINT while running: the terminal is given back, then tandemctl dies of it
  narrow        a 50x12 terminal: no line is wider than 50 columns, the screen holds 12 rows
  daemon-gone   tandemd killed: top says no tandemd answers instead of crashing; tandemd
                started again: the process rows come back; q exits 0
  stalled       a "daemon" that listens but never accepts, its backlog full: top says it is not
                accepting connections and q still quits at once; tandemctl status gives up too
  json          top --json: one snapshot with rates over the interval (launches/s of the
                training process > 0, bubble use measured, training retained 1 under fill);
                without a terminal and without --json: refused, status 2
  slo           policy slo with online inference (50 ms target): top --json and the screen show
                the policy, the target and the measured latency percentile

usage: ctl_top_e2e.py BUILD_DIR CASE
"""
import fcntl
import json
import os
import re
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import termios
import time

sys.path.insert(0, os.path.dirname(__file__))
from e2e_util import Env, check, wait_for  # noqa: E402

ESCAPE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


class PtyTop:
    """tandemctl top on the slave side of a fresh pty of rows x columns; reads what it draws."""

    def __init__(self, env, rows=40, columns=160, interval="0.2"):
        self.master, self.slave = os.openpty()
        fcntl.ioctl(self.slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
        self.attrs_before = termios.tcgetattr(self.slave)
        self.output = b""
        self.proc = subprocess.Popen([os.path.join(env.build, "bin", "tandemctl"), "top", "--interval", interval,
                                      "--socket", env.socket], stdin=self.slave, stdout=self.slave,
                                     stderr=self.slave, env=env.base, start_new_session=True)

    def read(self, seconds):
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.master], [], [], 0.05)
            if ready:
                try:
                    self.output += os.read(self.master, 65536)
                except OSError:  # the slave side closed
                    return

    def frame(self):
        """The text of the last full frame (each frame starts with cursor-home)."""
        text = self.output.decode(errors="replace")
        last = text.rsplit("\x1b[H", 1)[-1]
        return ESCAPE.sub("", last).replace("\r", "")

    def wait_screen(self, predicate, seconds=10):
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self.read(0.2)
            if predicate(self.frame()):
                return True
        return predicate(self.frame())

    def finish(self, timeout=10):
        rc = self.proc.wait(timeout=timeout)
        self.read(0.2)
        return rc

    def restored(self):
        """The terminal as before: same termios settings, alternate screen left, cursor shown."""
        text = self.output.decode(errors="replace")
        attrs = termios.tcgetattr(self.slave)
        return (attrs[3] == self.attrs_before[3] and text.rfind("\x1b[?1049l") > text.rfind("\x1b[?1049h") >= 0
                and text.rfind("\x1b[?25h") > text.rfind("\x1b[?25l") >= 0)

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        os.close(self.master)
        os.close(self.slave)


def row_of(frame, pid):
    return next((l for l in frame.splitlines() if l.split()[:1] == [str(pid)]), None)


def start_jobs(env, slo):
    train = env.start("train-sim", "--seconds", "60", "--report-every", "0", role="training")
    if slo:  # online inference at a modest rate, 50 ms target
        filler = env.start("infer-sim", "--seconds", "60", "--report-every", "0", "--rate", "40", "--kernel-us", "1000",
                           role="inference", TANDEM_SLO_MS="50")
    else:
        filler = env.start("infer-sim", "--seconds", "60", "--report-every", "0", role="batch-inference")
    pids = {train.pid, filler.pid}
    check(wait_for(lambda: (s := env.status()) and pids <= {c["pid"] for c in s["clients"]}, 20),
          "train-sim and infer-sim registered with tandemd")

    def training_launched():
        s = env.status()
        return s and any(sl["pid"] == train.pid and sl["launches"] > 0 for g in s["gpus"] for sl in g["slots"])
    check(wait_for(training_launched, 20), "and train-sim is launching kernels")
    return train, filler


def case_screen(env, train, filler):
    top = PtyTop(env)
    try:
        check(top.wait_screen(lambda f: (r := row_of(f, train.pid)) and "training" in r
                              and (r2 := row_of(f, filler.pid)) and "batch-inference" in r2),
              "top shows train-sim's row with role training and infer-sim's with batch-inference")
        frame = top.frame()
        check("GPU" in frame and "policy fill" in frame, "and the GPU table under the daemon's policy")
        check(top.wait_screen(lambda f: (r := row_of(f, train.pid)) and r.split()[3] not in ("-", "0")),
              f"training's launches/s appear once two samples are in: {row_of(top.frame(), train.pid)}")
        os.write(top.master, b"q")
        check(top.finish() == 0, "q: top exits with status 0")
        check(top.restored(), "and gave the terminal back (settings, alternate screen, cursor)")
    finally:
        top.close()


def case_signal(env, train, filler):
    for signo in (signal.SIGTERM, signal.SIGINT):
        top = PtyTop(env)
        try:
            check(top.wait_screen(lambda f: row_of(f, train.pid) is not None), "top is drawing")
            top.proc.send_signal(signo)
            check(top.finish() == -signo, f"{signo.name}: top dies of it")
            check(top.restored(), "after giving the terminal back (settings, alternate screen, cursor)")
        finally:
            top.close()


def case_narrow(env, train, filler):
    top = PtyTop(env, rows=12, columns=50)
    try:
        check(top.wait_screen(lambda f: row_of(f, train.pid) is not None), "top draws on a 50x12 terminal")
        top.read(0.5)
        lines = top.frame().split("\n")
        check(all(len(l) <= 50 for l in lines), f"no line wider than 50 columns: {max(map(len, lines))}")
        check(len(lines) <= 12, f"at most 12 rows: {len(lines)}")
        os.write(top.master, b"q")
        check(top.finish() == 0 and top.restored(), "q exits 0 and gives the terminal back")
    finally:
        top.close()


def case_daemon_gone(env, train, filler):
    top = PtyTop(env)
    try:
        check(top.wait_screen(lambda f: row_of(f, train.pid) is not None), "top shows train-sim")
        env.daemon_proc.kill()
        env.daemon_proc.wait()
        os.unlink(env.socket)
        check(top.wait_screen(lambda f: "no tandemd answers" in f), "tandemd killed: top says no tandemd answers")
        check(top.proc.poll() is None, "and keeps running")
        env.daemon_proc = env.daemon()
        # The hooked processes register again with the new daemon (docs/scheduler.md).
        check(top.wait_screen(lambda f: row_of(f, train.pid) is not None, 30),
              "tandemd back: train-sim's row is shown again")
        os.write(top.master, b"q")
        check(top.finish() == 0 and top.restored(), "q exits 0 and gives the terminal back")
    finally:
        top.close()


def case_stalled(env, train, filler):
    path = os.path.join(env.tmp, "stalled.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(0)
    queued = []
    while True:  # fill the backlog: the next connect would block
        c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        c.setblocking(False)
        try:
            c.connect(path)
        except BlockingIOError:
            c.close()
            break
        queued.append(c)
    stalled = Env(env.build)
    stalled.socket = path
    top = PtyTop(stalled)
    try:
        check(top.wait_screen(lambda f: "not accepting connections" in f), "top: tandemd is not accepting connections")
        started = time.monotonic()
        os.write(top.master, b"q")
        check(top.finish() == 0 and time.monotonic() - started < 3, "q quits at once, status 0")
        check(top.restored(), "and gives the terminal back")
    finally:
        top.close()
        shutil.rmtree(stalled.tmp, ignore_errors=True)
    p = subprocess.run([os.path.join(env.build, "bin", "tandemctl"), "status", "--socket", path], capture_output=True,
                       text=True, timeout=10)
    check(p.returncode == 1 and "not accepting connections" in p.stderr, f"tandemctl status gives up: {p.stderr!r}")
    listener.close()


def case_json(env, train, filler):
    ctl = os.path.join(env.build, "bin", "tandemctl")
    p = subprocess.run([ctl, "top", "--json", "--interval", "1", "--socket", env.socket], capture_output=True,
                       text=True, timeout=30)
    check(p.returncode == 0 and p.stdout.count("\n") == 1, f"top --json prints one line: {p.stdout!r} {p.stderr}")
    doc = json.loads(p.stdout)
    rows = {r["pid"]: r for r in doc["processes"]}
    check(rows.get(train.pid, {}).get("role") == "training", "with train-sim as training")
    check(rows.get(filler.pid, {}).get("role") == "batch-inference", "and infer-sim as batch-inference")
    check((rows[train.pid]["launches_per_s"] or 0) > 0 and 0.9 < doc["interval_s"] < 5,
          f"rates over the interval: {rows[train.pid]['launches_per_s']} launches/s over {doc['interval_s']} s")
    gpu = doc["gpus"][0]
    check(gpu["policy"] == "fill" and gpu["bytes_in_use"] > 0, f"the GPU's policy and memory in use: {gpu}")
    check(gpu["bubble_use"] is not None and 0 < gpu["bubble_use"] <= 1 and gpu["training_retained"] == 1.0,
          "bubble use measured; training retained 1.0 (the fill policy never holds training back)")
    refused = subprocess.run([ctl, "top", "--socket", env.socket], capture_output=True, text=True, timeout=10,
                             stdin=subprocess.DEVNULL)
    check(refused.returncode == 2 and refused.stdout == "" and "not a terminal" in refused.stderr,
          f"top without a terminal and without --json is refused: {refused.returncode} {refused.stderr!r}")


def case_slo(env, train, filler):
    ctl = os.path.join(env.build, "bin", "tandemctl")

    def snapshot():
        p = subprocess.run([ctl, "top", "--json", "--interval", "0.5", "--socket", env.socket], capture_output=True,
                           text=True, timeout=30)
        doc = json.loads(p.stdout) if p.returncode == 0 else None
        return doc if doc and doc["gpus"] and doc["gpus"][0]["latency_ms"] is not None else None
    doc = wait_for(snapshot, 20)
    check(doc is not None, "top --json under policy slo: the inference process's latency appears")
    gpu = doc["gpus"][0]
    check(gpu["policy"] == "slo" and gpu["slo_target_ms"] == 50 and gpu["latency_ms"] > 0,
          f"with the policy, the 50 ms target and the measured percentile: {gpu}")
    check(0 <= gpu["training_retained"] <= 1, f"and training's retained share: {gpu['training_retained']}")
    check(gpu["bubble_use"] is None, "bubble use unknown: under slo online inference does not wait for bubbles")
    rows = {r["pid"]: r for r in doc["processes"]}
    check(rows[filler.pid]["role"] == "inference", "the inference process's row has its role")
    top = PtyTop(env)
    try:
        check(top.wait_screen(lambda f: any(l.split()[:2] == ["".join(gpu["uuid"][:12]), "slo"]
                                            and l.split()[5] == "50.0" for l in f.splitlines())),
              "the screen's GPU row shows policy slo and the 50 ms target")
        os.write(top.master, b"q")
        check(top.finish() == 0 and top.restored(), "q exits 0 and gives the terminal back")
    finally:
        top.close()


CASES = {"screen": case_screen, "signal": case_signal, "narrow": case_narrow, "daemon-gone": case_daemon_gone,
         "stalled": case_stalled, "json": case_json,
         "slo": case_slo}


def main():
    build, case = sys.argv[1], sys.argv[2]
    env = Env(build)
    env.daemon_proc = env.daemon("slo" if case == "slo" else "fill")
    train = filler = None
    try:
        train, filler = start_jobs(env, slo=case == "slo")
        CASES[case](env, train, filler)
    finally:
        for p in (train, filler):
            if p and p.poll() is None:
                p.kill()
                p.wait()
        env.daemon_proc.kill()
        env.daemon_proc.wait()
        shutil.rmtree(env.tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
