"""The fake kubelet (tests/k8s/fake_kubelet.cpp) driven from a test: its events, JSON lines
collected by a thread; its commands, lines on its stdin (docs/kubernetes.md)."""
import json
import os
import subprocess
import threading
import time


class Kubelet:
    """The fake kubelet: its events (JSON lines) collected by a thread, commands on stdin."""

    def __init__(self, env):
        self.dir = os.path.join(env.tmp, "kubelet", "device-plugins")
        self.p = env.popen([os.path.join(env.build, "bin", "fake-kubelet"), self.dir], stdin=subprocess.PIPE,
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.events, self.cond = [], threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.p.stdout:
            with self.cond:
                self.events.append(json.loads(line))
                self.cond.notify_all()

    def mark(self):
        with self.cond:
            return len(self.events)

    def wait(self, predicate, seconds=10.0, since=0):
        """The first event from index `since` on that satisfies `predicate`, or None."""
        deadline = time.monotonic() + seconds
        with self.cond:
            while True:
                for e in self.events[since:]:
                    if predicate(e):
                        return e
                if not self.cond.wait(max(0.0, deadline - time.monotonic())) and time.monotonic() >= deadline:
                    return None

    def command(self, line, seconds=15.0):
        since = self.mark()
        self.p.stdin.write(line + "\n")
        self.p.stdin.flush()
        name = line.split()[0]
        self.wait(lambda e: e["event"] == "done" and e["command"] == name, seconds, since)
        return since

    def call(self, line):
        """allocate / preferred: the answer's event."""
        since = self.command(line)
        return self.wait(lambda e: e["event"] == line.split()[0], 1, since)

    def lists(self, resource, since=0):
        with self.cond:
            return [e for e in self.events[since:] if e["event"] == "devices" and e["resource"] == resource]

    def healthy(self, resource, gpu, since=0):
        """GPU `gpu`'s healthy devices in the last list of `resource` (None before any)."""
        lists = self.lists(resource, since)
        if not lists:
            return None
        return sum(1 for d in lists[-1]["devices"] if d["id"].startswith(nvidia(gpu)) and d["health"] == "Healthy")


def nvidia(uuid):
    return f"GPU-{uuid[:8]}-{uuid[8:12]}-{uuid[12:16]}-{uuid[16:20]}-{uuid[20:]}"
