"""Drives an LLM engine's probe script (vllm_probe.py, sglang_probe.py) run under libtandem in a
framework's own venv: the probe prints one JSON line per answer on stdout, everything else is
log kept for failures. Also tandemctl mem's view, which the engine tests read."""
import json
import os
import queue
import subprocess
import sys
import threading
import time

from e2e_util import preload

SKIP = 77


def require_module(python, module, setup):
    """Exits with the skip status, saying why, unless `python` exists and imports `module`."""
    if not os.path.exists(python):
        print(f"SKIP: no venv at {python} ({setup} could not create it)")
        sys.exit(SKIP)
    r = subprocess.run([python, "-c", f"import {module}"], capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        print(f"SKIP: {module} does not import in {python}: {r.stderr.strip()[-500:]}")
        sys.exit(SKIP)


class EngineProbe:
    """`python probe args...` under libtandem: its JSON answers in a queue, its log kept."""

    def __init__(self, env, python, probe, args, engine_env, **settings):
        e = dict(env.base, **engine_env, LD_PRELOAD=preload(env.build),
                 TANDEM_STATS_FILE=os.path.join(env.tmp, "stats-%p.json"), **settings)
        self.p = env.popen([python, probe, *args], env=e, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
        self.answers, self.err, self.lines = queue.Queue(), [], queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._read_err, daemon=True).start()

    def _read(self):  # engines log to stdout too
        for line in self.p.stdout:
            if line.startswith("{"):
                self.answers.put(json.loads(line))
            else:
                self.err.append(line)
                self.lines.put(line)
        self.answers.put(None)

    def _read_err(self):
        for line in self.p.stderr:
            self.err.append(line)
            self.lines.put(line)

    def stderr(self, n=40):
        return "".join(self.err[-n:])

    def answer(self, timeout):
        try:
            a = self.answers.get(timeout=timeout)
        except queue.Empty:
            a = None
        if a is None:
            raise SystemExit(f"FAIL: the engine gave no answer within {timeout} s (exit {self.p.poll()}):\n{self.stderr()}")
        return a

    def send(self, command, timeout=120):
        self.p.stdin.write(command + "\n")
        self.p.stdin.flush()
        return self.answer(timeout)

    def wait_for_line(self, text, timeout):
        """Blocks until the engine's log has a line containing `text`."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if text in self.lines.get(timeout=1):
                    return True
            except queue.Empty:
                if self.p.poll() is not None:
                    return False
        return False

    def stats(self, env, pid=None):
        with open(os.path.join(env.tmp, f"stats-{pid or self.p.pid}.json")) as f:
            return json.load(f)


def ctl_mem(env):
    out = subprocess.run([os.path.join(env.build, "bin", "tandemctl"), "mem", "--json", "--socket", env.socket],
                         capture_output=True, text=True, timeout=10)
    return json.loads(out.stdout) if out.returncode == 0 else None


def process_mem(env, pid):
    """tandemctl mem's row of `pid` (bytes_in_use, pool_bytes, quota_bytes, ...), None if absent."""
    for p in (ctl_mem(env) or {}).get("processes", []):
        if p.get("pid") == pid:
            return p
    return None


def pool_free(env):
    return sum(p.get("free_bytes", 0) for p in (ctl_mem(env) or {}).get("pools", []))
