"""What the end-to-end tests share: an environment on the simulated GPU (its own shared-memory
prefix and daemon socket), starting examples with or without tandem, and checks that print."""
import atexit
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

# sizeof(struct tandem_client_page) (include/tandem/shm_abi.h): the size a test maps a client's
# page with, as a hostile client would (e2e_shm_* checks the memfd has exactly this size).
PAGE_BYTES = 320


def last_json(text):
    lines = [l for l in text.splitlines() if l.startswith("{")]
    return json.loads(lines[-1])


def remove_segments(namespace):
    """The simulated GPU's shared-memory segments of SIMGPU_SHM namespace `namespace`."""
    prefix = namespace.lstrip("/")
    for name in os.listdir("/dev/shm") if os.path.isdir("/dev/shm") else []:
        if name == prefix or name.startswith(prefix + "-"):
            try:
                os.unlink(os.path.join("/dev/shm", name))
            except OSError:
                pass


def preload(build):
    """LD_PRELOAD for libtandem.so. TANDEM_TEST_PRELOAD replaces it: scripts/sanitize.sh puts
    ASan's runtime first, then the normal build's library (docs/sanitizers.md)."""
    return os.environ.get("TANDEM_TEST_PRELOAD") or os.path.join(build, "lib", "libtandem.so")


def real_driver():
    """TANDEM_E2E_REAL_DRIVER=1: the harness runs its programs on the system's CUDA driver (a real
    GPU, scripts/gpu-check.sh) instead of the simulated one."""
    return os.environ.get("TANDEM_E2E_REAL_DRIVER") == "1"


class Env:
    def __init__(self, build):
        self.build = build
        self.tmp = tempfile.mkdtemp(prefix="tandem-e2e-")
        self.socket = os.path.join(self.tmp, "tandemd.sock")
        self.base = dict(os.environ, LD_LIBRARY_PATH=os.path.join(build, "simgpu"),
                         SIMGPU_SHM=f"/simgpu-e2e-{os.getpid()}", TANDEM_SOCKET=self.socket)
        if real_driver():  # the environment's own library path, where the system's driver is found
            self.base.pop("LD_LIBRARY_PATH")
            if "LD_LIBRARY_PATH" in os.environ:
                self.base["LD_LIBRARY_PATH"] = os.environ["LD_LIBRARY_PATH"]
        # Whatever ends the test (a failed check, an exception in the harness), nothing it
        # started outlives it (a daemon left running holds ctest's output open until the
        # timeout), and its files go with it.
        self.started = []
        # The simulated GPU's shared segments are named after this harness's pid; one left by an
        # earlier process of the same pid may name an owner whose pid is alive again, and the
        # GPU would never be free. Fresh at the start, gone at the end.
        self.remove_segments()
        atexit.register(self.kill_started)

    def remove_segments(self):
        remove_segments(self.base["SIMGPU_SHM"])

    def kill_started(self):
        for p in self.started:
            if p.poll() is None:
                p.kill()
                try:
                    p.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    pass
        self.remove_segments()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def popen(self, *args, **kwargs):
        """subprocess.Popen, killed at the test's exit if still running."""
        p = subprocess.Popen(*args, **kwargs)
        self.started.append(p)
        return p

    def start(self, exe, *args, role=None, **settings):
        """An example; with a role, under libtandem.so. Keyword arguments are TANDEM_* settings."""
        env = dict(self.base, **settings)
        if role:
            env.update(LD_PRELOAD=preload(self.build), TANDEM_ROLE=role,
                       TANDEM_STATS_FILE=os.path.join(self.tmp, "stats-%p.json"))
        return self.popen([os.path.join(self.build, "bin", exe), *args], env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def daemon(self, policy="fill", metrics=False, log="warn", log_file=None, **settings):
        """tandemd with `policy`; keyword arguments are TANDEM_* settings for it. `metrics`: with
        its metrics endpoint on a free port, whose address is then self.metrics (metrics_page);
        `log_file`: its log, at level `log`, written there."""
        err = open(log_file, "w") if log_file else subprocess.PIPE
        d = self.popen([os.path.join(self.build, "bin", "tandemd"), "--foreground", "--socket", self.socket,
                        "--log", log, "--policy", policy, *(["--metrics", "127.0.0.1:0"] if metrics else [])],
                       env=dict(self.base, **settings), stderr=err, text=True)
        if log_file:
            err.close()
        up = wait_for(lambda: os.path.exists(self.socket) and (not metrics or self.status()), 5)
        if not up:
            raise SystemExit("FAIL: tandemd did not start")
        if metrics:
            self.metrics = up["daemon"]["metrics"]
        return d

    def status(self):
        out = subprocess.run([os.path.join(self.build, "bin", "tandemctl"), "status", "--json", "--socket", self.socket],
                             capture_output=True, text=True, timeout=10)
        return json.loads(out.stdout) if out.returncode == 0 else None

    def status_when(self, predicate, procs=(), seconds=20):
        """tandemd's status once `predicate(status)` holds (polled); None when `seconds` pass or
        one of `procs` exits first. Tests wait for a state this way instead of reading it at a
        fixed instant, which a loaded machine reaches late."""
        def poll():
            s = self.status()
            if s and predicate(s):
                return s
            return "exited" if any(p.poll() is not None for p in procs) else None
        s = wait_for(poll, seconds)
        return s if isinstance(s, dict) else None

    def registered(self, *procs, seconds=20):
        """tandemd's status once every one of `procs` has a GPU slot (status_when)."""
        return self.status_when(lambda s: {p.pid for p in procs} <= set(slots_by_pid(s)), procs, seconds)


def ctl(env, *args):
    """tandemctl ARGS against the test's tandemd (its result, whatever the exit code)."""
    return subprocess.run([os.path.join(env.build, "bin", "tandemctl"), *args, "--socket", env.socket],
                          capture_output=True, text=True, timeout=10)


def mem_row(env, pid):
    """`tandemctl mem --json`'s row of process `pid`, or None."""
    out = ctl(env, "mem", "--json")
    rows = [r for r in json.loads(out.stdout)["processes"] if r["pid"] == pid] if out.returncode == 0 else []
    return rows[0] if rows else None


def stats_file(env, pid):
    """What process `pid` wrote to its statistics file (TANDEM_STATS_FILE=stats-%p.json in env.tmp)."""
    with open(os.path.join(env.tmp, f"stats-{pid}.json")) as f:
        return json.load(f)


def free_port():
    """A TCP port on 127.0.0.1 free now (a rendezvous for distributed ranks, a scrape target)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def slots_by_pid(status):
    """pid -> its GPU slot in a status document."""
    return {x["pid"]: x for g in (status or {}).get("gpus", []) for x in g["slots"]}


def finish(p, timeout=60):
    out, err = p.communicate(timeout=timeout)
    if p.returncode != 0:
        raise SystemExit(f"FAIL: {p.args[0]} exited with {p.returncode}: {err[-2000:]}")
    return last_json(out)


def metrics_page(env):
    """The text of the metrics endpoint of env's tandemd (Env.daemon(metrics=True))."""
    with urllib.request.urlopen(f"http://{env.metrics}/metrics", timeout=5) as r:
        return r.read().decode()


def metric_value(page, name, **labels):
    """The value of the one sample of `name` whose labels include `labels`, or None."""
    for line in page.splitlines():
        m = re.fullmatch(r"(\w+)(?:\{(.*)\})? (\S+)", line)
        if not m or m.group(1) != name:
            continue
        have = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(2) or ""))
        if all(have.get(k) == str(v) for k, v in labels.items()):
            return float(m.group(3))
    return None


def wait_for(predicate, seconds=5.0):
    """The predicate's first true value within `seconds` (polled every 50 ms), else its last."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    return predicate()


def check(cond, message):
    print(("ok   " if cond else "FAIL ") + message)
    if not cond:
        raise SystemExit(1)


def run_case(cases):
    """The main of a test file whose cases each take an Env: argv is BUILD_DIR CASE."""
    build, case = sys.argv[1], sys.argv[2]
    env = Env(build)
    try:
        cases[case](env)
    finally:
        shutil.rmtree(env.tmp, ignore_errors=True)
