#!/usr/bin/env python3
"""Identity, authorization and trust domains end to end (docs/security.md): a root tandemd and
processes of a second local user, made for the test (useradd) and removed after it.

  roles    the second user reaches the socket (mode 0666) but may not register as training or
           inference by default, only as batch-inference; a hooked program of that user asking
           for training is registered as batch-inference (gated) and says so in one log line; with a config that allows it,
           training registers; it cannot change the first user's (root's) memory quota
  pool     pooled chunks do not cross uids: the second user's online inference does not take
           root's training memory (no handover, training's quota untouched) and does not get
           chunks root's exited process left; with a config joining both in one trust domain,
           it does take them (a handover)
  pidns    a hooked program in its own PID namespace (unshare --pid) registers and is shown
           with its pid as tandemd sees it; asking for training as root there, it is registered
           as batch-inference (uid 0 outside tandemd's namespaces is not tandemd's own user)

Needs root (useradd, unshare, a daemon of another user); otherwise it prints why and exits 77
(ctest: skipped).

usage: identity_e2e.py BUILD_DIR KERNEL_IMAGE roles|pool|pidns
"""
import json
import os
import pwd
import shutil
import signal
import socket
import stat
import struct
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from e2e_util import Env, check, wait_for  # noqa: E402

SKIP = 77
CHUNK = "4M"
HELLO, HELLO_OK, STATUS, QUOTA, QUOTA_REPLY, ERROR = 1, 2, 3, 7, 8, 0xFFFF
GPU = "73696d6770752d757569642d00000000"  # any well-formed UUID will do for a raw client


def ask_raw(path, msg_type, payload):
    """One request and its reply: (type, parsed payload). A passed descriptor is dropped. A
    hello carries the sender's pid, as libtandem's does (tandemd takes it from the kernel)."""
    if msg_type == HELLO:
        payload = json.dumps(dict(json.loads(payload), pid=os.getpid()))
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(5)
    s.connect(path)
    body = payload.encode()
    s.sendall(struct.pack("<II", msg_type, len(body)) + body)
    data = b""
    while len(data) < 8:
        data += s.recv(8 - len(data))
    t, n = struct.unpack("<II", data)
    body = b""
    while len(body) < n:
        body += s.recv(n - len(body))
    s.close()
    return t, json.loads(body)


def copies_for_others(tmp, *paths):
    """Copies of `paths` (files or directories of the build) in TMP/shared, readable by every
    user and executable where they were by their owner, removed with TMP: a second local
    user cannot run what is under build/ when the clone sits in a directory other users cannot
    traverse (a home directory of mode 0700, a `mktemp -d`). Returns the copies' paths, in order."""
    os.chmod(tmp, 0o755)
    shared = os.path.join(tmp, "shared")
    os.makedirs(shared, exist_ok=True)
    copies = []
    for path in paths:
        copy = os.path.join(shared, os.path.basename(path.rstrip("/")))
        if os.path.isdir(path):
            shutil.copytree(path, copy, dirs_exist_ok=True)
            files = [os.path.join(d, f) for d, _, fs in os.walk(copy) for f in fs]
        else:
            shutil.copy2(path, copy)
            files = [copy]
        for f in files:
            os.chmod(f, 0o755 if os.stat(f).st_mode & stat.S_IXUSR else 0o644)
        copies.append(copy)
    for d, _, _ in os.walk(shared):
        os.chmod(d, 0o755)
    return copies


class OtherUser:
    """A local user made for this test, removed at the end."""

    def __init__(self):
        self.name = f"tdm{os.getpid() % 100000}"
        for attempt in range(20):  # useradd takes /etc/passwd's lock; parallel tests may hold it
            r = subprocess.run(["useradd", "-M", "-s", "/usr/sbin/nologin", self.name], capture_output=True, text=True)
            if r.returncode in (0, 9):  # 9: exists already (a previous run that was killed)
                break
            time.sleep(0.2)
        else:
            raise SystemExit(f"FAIL: useradd {self.name}: {r.stderr}")
        pw = pwd.getpwnam(self.name)
        self.uid, self.gid = pw.pw_uid, pw.pw_gid

    def remove(self):
        for attempt in range(20):
            if subprocess.run(["userdel", self.name], capture_output=True).returncode in (0, 6):
                return
            time.sleep(0.2)

    def popen(self, cmd, env, **kw):
        return subprocess.Popen(cmd, env=env, user=self.uid, group=self.gid, extra_groups=[], **kw)

    def share(self, tmp, *paths):
        """Copies of `paths` in TMP/shared that this user can read and run (copies_for_others),
        checked. Returns the copies' paths, in order."""
        copies = copies_for_others(tmp, *paths)
        self.require_reach(copies)
        return copies

    def require_reach(self, paths):
        """Skips the test (77), saying why, when this user cannot read `paths` (copies made by
        copies_for_others): a parent of their temporary directory is closed to other users too."""
        for path in paths:
            if subprocess.run(["test", "-r", path], user=self.uid, group=self.gid, extra_groups=[]).returncode != 0:
                print(f"SKIP: the local user {self.name} cannot reach {path}, a copy of what it runs: a parent "
                      "directory is closed to other users (set TMPDIR to one that is not)")
                raise SystemExit(SKIP)

    def ask(self, path, msg_type, payload):
        """ask_raw from a child process that became this user (no exec: any interpreter will do)."""
        r, w = os.pipe()
        child = os.fork()
        if child == 0:
            try:
                os.close(r)
                os.setgroups([])
                os.setgid(self.gid)
                os.setuid(self.uid)
                try:
                    answer = ask_raw(path, msg_type, payload)
                except OSError as e:  # (None, why): the socket refused this user
                    answer = (None, f"{type(e).__name__}: {e}")
                os.write(w, json.dumps(answer).encode())
            finally:
                os._exit(0)
        os.close(w)
        with os.fdopen(r) as f:
            text = f.read()
        os.waitpid(child, 0)
        check(bool(text), f"the raw client ran as {self.name}")
        t, reply = json.loads(text)
        return t, reply


def start_daemon(env, config=None, args=()):
    """A root tandemd; `config` (a dict) goes to --config, then `args`."""
    cmd = [os.path.join(env.build, "bin", "tandemd"), "--foreground", "--socket", env.socket, "--log", "info"]
    if config is not None:
        path = os.path.join(env.tmp, f"tandemd-{time.monotonic_ns()}.json")
        with open(path, "w") as f:
            json.dump(config, f)
        cmd += ["--config", path]
    d = subprocess.Popen(cmd + list(args), env=dict(env.base, TANDEM_MEM_CHUNK=CHUNK, TANDEM_MEM_WATERMARK=""),
                         stderr=subprocess.PIPE, text=True)
    check(wait_for(lambda: os.path.exists(env.socket) or d.poll() is not None) and d.poll() is None,
          f"tandemd started with config {json.dumps(config)} {' '.join(args)}")
    return d


def stop(d):
    d.terminate()
    d.wait(timeout=10)


def build_paths(env, image):
    """What the hooked probe runs with: the probe, its kernel image, the preload library, the
    simulated driver's directory, and tandemctl."""
    return {"probe": os.path.join(env.build, "tests", "fixtures", "fixture_pool_probe"), "image": image,
            "preload": os.path.join(env.build, "lib", "libtandem.so"), "simgpu": os.path.join(env.build, "simgpu"),
            "tandemctl": os.path.join(env.build, "bin", "tandemctl")}


def probe_env(env, role, user=None, pool=True, **settings):
    paths = user.paths if user else build_paths(env, None)
    run_env = dict(env.base, TANDEM_MEM_CHUNK=CHUNK, TANDEM_MEM_WATERMARK="", TANDEM_ROLE=role,
                   LD_PRELOAD=paths["preload"], LD_LIBRARY_PATH=paths["simgpu"], TANDEM_STATS_FILE="", **settings)
    if pool:
        run_env["TANDEM_MEM_POOL"] = "1"
    if user:  # the simulator's contention segment is per user (it is created 0600)
        run_env["SIMGPU_SHM"] = env.base["SIMGPU_SHM"] + "-" + user.name
    return run_env


def probe(env, image, mode, mib, role, user=None, pool=True, **settings):
    paths = user.paths if user else build_paths(env, image)
    cmd = [paths["probe"], mode, paths["image"], str(mib)]
    kw = dict(stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    run_env = probe_env(env, role, user, pool, **settings)
    return user.popen(cmd, run_env, **kw) if user else subprocess.Popen(cmd, env=run_env, **kw)


def done(p, what, timeout=30):
    out, err = p.communicate(timeout=timeout)
    check(p.returncode == 0, f"{what} exits 0 ({(out + err).strip()[-400:]})")
    return out, err


def slot_of(env, pid):
    s = env.status()
    slots = [x for g in (s or {}).get("gpus", []) for x in g["slots"] if x["pid"] == pid]
    return slots[0] if slots else None


def pool_of(env):
    s = env.status()
    return s["gpus"][0]["pool"] if s and s["gpus"] else None


def case_roles(env, image, user):
    # Default socket (tandemd's uid and group, 0660): the other user cannot even connect.
    d = start_daemon(env)
    try:
        t, reply = user.ask(env.socket, HELLO, json.dumps({"role": "batch-inference"}))
        check(t is None and "PermissionError" in reply, f"by default uid {user.uid} cannot reach the socket ({reply})")
    finally:
        stop(d)
    # Its group owns the socket: its members are trusted with the protected roles.
    d = start_daemon(env, args=["--socket-group", user.name])
    try:
        t, reply = user.ask(env.socket, HELLO, json.dumps({"role": "training", "gpu": GPU}))
        check(t == HELLO_OK, f"a member of the socket's group registers as training: {reply}")
    finally:
        stop(d)

    d = start_daemon(env, {"socket_mode": "0666"})
    try:
        hello = lambda role: json.dumps({"role": role, "gpu": GPU})  # noqa: E731
        for role in ("training", "inference"):
            t, reply = user.ask(env.socket, HELLO, hello(role))
            check(t == ERROR and reply["errno"] == 13 and "not permitted" in reply["message"],
                  f"by default uid {user.uid} may not register as {role}: {reply}")
        t, reply = user.ask(env.socket, HELLO, hello("batch-inference"))
        check(t == HELLO_OK, f"it may register as batch-inference: {reply}")
        t, reply = ask_raw(env.socket, HELLO, hello("training"))
        check(t == HELLO_OK, f"root (tandemd's own uid) may register as training: {reply}")

        # A hooked program of that user asking for training: registered as batch-inference, gated,
        # never ungated; one log line. (It registers after its first launch; `dirty` launches one,
        # then waits for a line.)
        p = probe(env, image, "dirty", 8, "training", user=user, pool=False)
        check(p.stdout.readline().startswith("freed"), f"a training program of uid {user.uid} runs")
        s = env.status_when(lambda st: any(c["pid"] == p.pid for c in st["clients"]), [p])
        roles = [c["role"] for c in (s or {}).get("clients", []) if c["pid"] == p.pid]
        check(roles == ["batch-inference"], f"it is registered as a filler, gated: {roles}")
        time.sleep(1.5)  # were the refused role asked for again, each attempt (1 s) would log
        p.stdin.write("\n")
        p.stdin.flush()
        out, err = done(p, f"a training program of uid {user.uid}")
        refusals = [l for l in err.splitlines() if "refused role training" in l]
        check(len(refusals) == 1 and "registering as batch-inference (gated)" in refusals[0],
              f"it said once that it runs as a filler: {refusals or err[-400:]}")

        # Root's training process; the other user may not change its quota.
        holder = probe(env, image, "hold", 8, "training")
        check(holder.stdout.readline().startswith("ready"), "root's training process is running")
        check(wait_for(lambda: slot_of(env, holder.pid)) is not None, "root's training process registered")
        ctl = subprocess.run([user.paths["tandemctl"], "mem", "--set", str(holder.pid), "1M",
                              "--socket", env.socket], user=user.uid, group=user.gid, extra_groups=[],
                             capture_output=True, text=True, timeout=10)
        check(ctl.returncode == 1 and "only uid 0 in the process's own namespaces or tandemd's quota admins" in ctl.stderr,
              f"uid {user.uid} cannot set root's process's quota with tandemctl mem --set: {ctl.stderr.strip()}")
        t, reply = user.ask(env.socket, QUOTA, json.dumps({"pid": holder.pid, "size": "1M"}))
        check(t == ERROR and reply["errno"] == 1, f"nor with a raw request: {reply}")
        check(slot_of(env, holder.pid)["assigned_quota_bytes"] == 0, "the quota is unchanged")
        t, reply = ask_raw(env.socket, QUOTA, json.dumps({"pid": holder.pid, "size": "1G"}))
        check(t == QUOTA_REPLY, f"root can: {reply}")
        holder.stdin.write("\n")
        holder.stdin.flush()
        done(holder, "root's training process")
    finally:
        stop(d)

    d = start_daemon(env, {"socket_mode": "0666", "roles": {"training": [f"user:{user.name}"]}})
    try:
        t, reply = user.ask(env.socket, HELLO, json.dumps({"role": "training", "gpu": GPU}))
        check(t == HELLO_OK, f"with a config that allows it, uid {user.uid} registers as training: {reply}")
    finally:
        stop(d)


def pool_run(env, image, user, joined):
    config = {"socket_mode": "0666", "roles": {"inference": [f"user:{user.name}"]}}
    if joined:
        config["trust_domains"] = {"team": ["user:root", f"user:{user.name}"]}
    d = start_daemon(env, config)
    try:
        # Root's training process keeps 32 MiB of idle pooled memory.
        train = probe(env, image, "cached", 32, "training")
        check(train.stdout.readline().startswith("ready"), "root's training process holds 32 MiB of pooled memory")
        wait_for(lambda: (p := pool_of(env)) and p["bytes"] == 32 << 20)
        # The other user's online inference needs 32 MiB.
        out, _ = done(probe(env, image, "take", 32, "inference", user=user), f"inference of uid {user.uid}")
        pool, slot = pool_of(env), slot_of(env, train.pid)
        if joined:
            check(pool["handovers"] >= 1 and pool["bytes"] == 32 << 20,
                  f"one trust domain: inference took training's chunks ({pool})")
        else:
            check(pool["handovers"] == 0 and pool["bytes"] == 64 << 20,
                  f"no handover across uids; inference made its own 32 MiB ({pool})")
            check(slot["assigned_quota_bytes"] == 0, f"training's quota was not touched ({slot['assigned_quota_bytes']})")
        train.stdin.write("\n")
        train.stdin.flush()
        done(train, "root's training process")
        if joined:
            return
        # Root's process is gone; its chunks are free, but only to root's domain.
        wait_for(lambda: (p := pool_of(env)) and p["free_bytes"] == p["bytes"])
        _, err = done(probe(env, image, "take", 64, "inference", user=user, TANDEM_LOG="info"),
                      f"inference of uid {user.uid} (64 MiB)")
        check("32 MiB free belong to other trust domains" in err,
              f"tandemd's answer says why the free chunks are not its: {[l for l in err.splitlines() if 'short' in l]}")
        pool = pool_of(env)
        check(pool["bytes"] == 96 << 20, f"it reused only its own 32 MiB and made 32 more; root's stayed apart ({pool})")
    finally:
        stop(d)


def case_pool(env, image, user):
    pool_run(env, image, user, joined=False)
    pool_run(env, image, user, joined=True)


def case_pidns(env, image, user):
    d = start_daemon(env)
    try:
        cmd = ["unshare", "--pid", "--fork", "--mount-proc",
               os.path.join(env.build, "tests", "fixtures", "fixture_pool_probe"), "hold", image, "8"]
        p = subprocess.Popen(cmd, env=probe_env(env, "training"), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        check(p.stdout.readline().startswith("ready"), "a training program runs in its own PID namespace")
        with open(f"/proc/{p.pid}/task/{p.pid}/children") as f:
            host_pid = int(f.read().split()[0])
        with open(f"/proc/{host_pid}/status") as f:
            nspid = [l.split()[1:] for l in f if l.startswith("NSpid:")][0]
        check(nspid[-1] == "1", f"it is pid 1 in its namespace, {host_pid} in tandemd's (NSpid {nspid})")
        s = wait_for(lambda: (st := env.status()) and any(c["pid"] == host_pid for c in st["clients"]) and st)
        clients = [c for c in (s or {}).get("clients", []) if c["pid"] == host_pid]
        # Root, but in its own PID and mount namespaces: not tandemd's own user, so its training
        # role is refused and it is registered as a filler, gated (docs/security.md).
        check(len(clients) == 1 and clients[0]["role"] == "batch-inference" and not clients[0]["host_namespaces"],
              f"tandemd registered it under pid {host_pid}, as batch-inference: {clients}")
        check(slot_of(env, host_pid) is not None, "its GPU slot is shown with that pid")
        ctl = subprocess.run([os.path.join(env.build, "bin", "tandemctl"), "status", "--socket", env.socket],
                             capture_output=True, text=True, timeout=10)
        check(any(l.split()[:1] == [str(host_pid)] for l in ctl.stdout.splitlines()), "tandemctl status lists it")
        p.stdin.write("\n")
        p.stdin.flush()
        done(p, "the program in its own PID namespace")
    finally:
        stop(d)


def main():
    build, image, case = sys.argv[1], sys.argv[2], sys.argv[3]
    if os.geteuid() != 0:
        print(f"SKIP: identity_e2e {case} needs root (it adds a user and runs a root tandemd)")
        sys.exit(SKIP)
    env = Env(build)
    os.chmod(env.tmp, 0o755)  # the other user reaches the socket inside it
    user = OtherUser()
    try:
        # What the other user runs, copied where it can read it (the build may not be).
        names = build_paths(env, image)
        user.paths = dict(zip(names, user.share(env.tmp, *names.values())))
        {"roles": case_roles, "pool": case_pool, "pidns": case_pidns}[case](env, image, user)
    finally:
        user.remove()
        subprocess.run(["rm", "-rf", env.tmp])


if __name__ == "__main__":
    main()
