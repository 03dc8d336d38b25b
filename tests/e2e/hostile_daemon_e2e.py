#!/usr/bin/env python3
"""tandemd against a hostile local client (docs/security.md): one case per attack, each speaking
the socket protocol directly (a header {type, length}, then JSON) the way no well-behaved
library would.

  release-race   a pool release whose handling drops the releasing client itself (its socket
                 full of unread replies while its own acquisition waits): the daemon survives,
                 and under valgrind (when installed) reads no freed memory
  pipeline       a client pipelining status requests as fast as it can while a batch-inference
                 client is gated: the tick's heartbeat in the GPU's shared memory stays fresh
                 (never older than TANDEM_FAIL_OPEN_MS, so the gated client never fails open)
  deaf           clients flooding status requests and never reading: dropped, and the daemon's
                 memory stays bounded
  fds            descriptors passed without pool_register, and made-up GPU UUIDs: capped, and
                 everything the daemon held for them is freed on disconnect; from a user allowed
                 only batch-inference, 2 made-up GPUs at most (EDQUOT), reported unverified
  emfile         the daemon at its descriptor limit with connections pending: it sheds them
                 instead of spinning, and serves again once descriptors are free
  socket-path    a regular file at --socket is refused and kept; a live daemon's socket is
                 refused; an old daemon exiting does not remove a newer daemon's socket
  names          a training job named with a newline, escape sequences, a C1 control and a
                 right-to-left override: tandemctl status and mem print no control character and
                 no forged line; status --json carries the name intact

usage: hostile_daemon_e2e.py BUILD_DIR CASE
"""
import errno
import json
import mmap
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(__file__))
from e2e_util import check, run_case, wait_for  # noqa: E402

HELLO, HELLO_OK, STATUS, STATUS_REPLY = 1, 2, 3, 4
POOL_ACQUIRE, POOL_CHUNK, POOL_GRANTED, POOL_REGISTER, POOL_REGISTERED, POOL_RELEASE = 9, 10, 11, 12, 13, 14
ERROR = 0xFFFF
HEARTBEAT_OFFSET = 32  # tandem_shm_header.daemon_heartbeat_ns (include/tandem/shm_abi.h)
FAIL_OPEN_MS = 100     # TANDEM_FAIL_OPEN_MS's default: a heartbeat older than this fails clients open


def frame(kind, payload=b"{}"):
    if not isinstance(payload, bytes):
        payload = json.dumps(payload).encode()
    return struct.pack("<II", kind, len(payload)) + payload


def connect(path, timeout=5.0):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    s.connect(path)
    return s


def recv_exact(s, n):
    data = b""
    while len(data) < n:
        chunk = s.recv(n - len(data))
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    return data


def recv_msg(s):
    """(type, payload dict, passed fds)."""
    data, fds, _, _ = socket.recv_fds(s, 8, 4)
    if len(data) < 8:
        data += recv_exact(s, 8 - len(data))
    kind, length = struct.unpack("<II", data)
    body = recv_exact(s, length) if length else b""
    return kind, (json.loads(body) if body else {}), fds


def ask(s, kind, payload=None, fd=None):
    data = frame(kind, payload if payload is not None else {})
    if fd is None:
        s.sendall(data)
    else:
        socket.send_fds(s, [data], [fd])
    return recv_msg(s)


def hello(s, role="none", gpu=None):
    payload = {"pid": os.getpid(), "role": role}
    if gpu:
        payload["gpu"] = gpu
    return ask(s, HELLO, payload)


def fd_count(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def peak_rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith("VmHWM:"))


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def gpu_uuid(n):
    return f"{n:032x}"


def stop(d):
    if d.poll() is None:
        d.terminate()
    try:
        d.wait(timeout=10)
    except subprocess.TimeoutExpired:
        d.kill()
        d.wait()
    return d.returncode


def memfd(size):
    fd = os.memfd_create("hostile-chunk")
    os.ftruncate(fd, size)
    return fd


def case_release_race(env):
    chunk = 4 << 20
    settings = dict(TANDEM_MEM_CHUNK="4M", TANDEM_MEM_WATERMARK="", TANDEM_MEM_HANDOVER_MS="10000")
    # Under valgrind (when installed) a read of freed memory is seen even where it does not crash.
    valgrind = shutil.which("valgrind") if os.environ.get("TANDEM_TEST_VALGRIND", "1") != "0" else None
    log = os.path.join(env.tmp, "valgrind.log")
    supp = os.path.join(os.path.dirname(os.path.abspath(__file__)), "valgrind.supp")
    prefix = [valgrind, "--quiet", f"--log-file={log}", f"--suppressions={supp}", "--error-exitcode=99"] if valgrind else []
    d = subprocess.Popen(prefix + [os.path.join(env.build, "bin", "tandemd"), "--foreground", "--socket", env.socket,
                                   "--log", "warn"], env=dict(env.base, **settings), stderr=subprocess.PIPE, text=True)
    try:
        check(wait_for(lambda: os.path.exists(env.socket) and env.status() is not None, 60),
              "tandemd started" + (" under valgrind" if valgrind else ""))
        gpu = gpu_uuid(0xabc)
        training = connect(env.socket, 30)
        check(hello(training, "training", gpu)[0] == HELLO_OK, "a training client registered")
        for _ in range(2):
            fd = memfd(chunk)
            check(ask(training, POOL_REGISTER, {"bytes": chunk}, fd)[0] == POOL_REGISTERED, "training pooled a chunk")
            os.close(fd)
        inference = connect(env.socket, 30)
        check(hello(inference, "inference", gpu)[0] == HELLO_OK, "an inference client registered")
        fd = memfd(chunk)
        kind, reply, _ = ask(inference, POOL_REGISTER, {"bytes": chunk}, fd)
        os.close(fd)
        own = reply["id"]
        # Two chunks wanted, none free: the daemon lowers training's quota and the acquisition waits.
        inference.sendall(frame(POOL_ACQUIRE, {"bytes": 2 * chunk, "chunk_bytes": chunk, "wait_ms": 10000, "seq": 7}))
        time.sleep(0.5)
        kind, reply, _ = ask(inference, POOL_ACQUIRE, {"bytes": chunk, "chunk_bytes": chunk, "seq": 9})
        check(kind == ERROR and reply["errno"] == 16, f"a second acquisition while one waits is refused ({reply})")
        # Replies it never reads fill its socket; then it gives back its own chunk, which the
        # waiting acquisition takes at once: handing it over fails, and the daemon drops the
        # very client whose release it is still handling.
        inference.sendall(frame(STATUS) * 400 + frame(POOL_RELEASE, {"ids": [own], "seq": 8}))
        time.sleep(3 if valgrind else 0.5)
        inference.close()
        status = wait_for(lambda: d.poll() is None and env.status(), 30)
        check(d.poll() is None and status, "tandemd survived the release that dropped its own client")
        check(len(status["clients"]) == 1 and status["clients"][0]["role"] == "training",
              f"the inference client is gone, training still served ({status['clients']})")
        pool = status["gpus"][0]["pool"]
        check(pool["chunks"] == 3, f"the pool still knows its 3 chunks ({pool})")
        training.close()
    finally:
        code = stop(d)
    if valgrind:
        with open(log) as f:
            report = f.read()
        bad = "Invalid read" in report or "Invalid write" in report or code == 99
        if bad:
            print(report[:4000])
        check(not bad, f"valgrind saw no use of freed memory (tandemd exited {code})")


def case_pipeline(env):
    d = env.daemon()
    try:
        gated = connect(env.socket)
        kind, reply, fds = hello(gated, "batch-inference", gpu_uuid(0x5eed))
        # hello_ok brings the GPU's segment, then the client's own page (include/tandem/shm_abi.h).
        check(kind == HELLO_OK and len(fds) == 2, f"a batch-inference client registered and got the GPU's segment ({reply})")
        shm = mmap.mmap(fds[0], 4096, mmap.MAP_SHARED, mmap.PROT_READ)
        flooder = connect(env.socket)
        stop_flag = threading.Event()
        received = [0]

        def flood():
            burst = frame(STATUS) * 5000
            try:
                while not stop_flag.is_set():
                    flooder.sendall(burst)
            except OSError:
                pass

        def drain():
            try:
                while not stop_flag.is_set():
                    data = flooder.recv(1 << 20)
                    if not data:
                        break
                    received[0] += len(data)
            except OSError:
                pass

        threads = [threading.Thread(target=flood, daemon=True), threading.Thread(target=drain, daemon=True)]
        for t in threads:
            t.start()
        worst = 0.0
        end = time.monotonic() + 3.0
        while time.monotonic() < end:
            beat = struct.unpack_from("<Q", shm, HEARTBEAT_OFFSET)[0]
            age_ms = (time.clock_gettime_ns(time.CLOCK_MONOTONIC) - beat) / 1e6
            worst = max(worst, age_ms)
            time.sleep(0.002)
        stop_flag.set()
        print(f"     flooder got {received[0] >> 10} KiB of replies; oldest heartbeat seen {worst:.1f} ms")
        check(received[0] > 1 << 20, "the pipelining client was served too")
        check(worst < FAIL_OPEN_MS, f"the tick kept the heartbeat fresh under the flood ({worst:.1f} ms < {FAIL_OPEN_MS} ms)")
        check(d.poll() is None and env.status() is not None, "tandemd still answers")
    finally:
        stop(d)


def case_deaf(env):
    d = env.daemon()
    try:
        # A registered client makes each status reply longer (its slot's figures).
        registered = connect(env.socket)
        hello(registered, "batch-inference", gpu_uuid(0xdea7))
        before = peak_rss_kib(d.pid)
        deaf = [connect(env.socket) for _ in range(4)]
        burst = frame(STATUS) * 2000
        dropped = 0
        for s in deaf:
            s.settimeout(10)
            try:
                for _ in range(200):  # 400,000 requests, hundreds of MiB of replies, never read
                    s.sendall(burst)
            except (BrokenPipeError, ConnectionResetError):
                dropped += 1
            except OSError as e:
                print(f"     {e}")
        grown = (peak_rss_kib(d.pid) - before) / 1024
        print(f"     tandemd's peak RSS grew by {grown:.1f} MiB")
        check(dropped == len(deaf), f"every client that never reads was dropped ({dropped} of {len(deaf)})")
        check(grown < 32, f"tandemd's peak memory stayed bounded (+{grown:.1f} MiB < 32 MiB)")
        check(hello(connect(env.socket))[0] == HELLO_OK and env.status() is not None, "the others are still served")
        for s in deaf:
            s.close()
    finally:
        stop(d)


def case_fds(env):
    d = env.daemon()
    try:
        baseline = fd_count(d.pid)
        # Descriptors passed with messages that are not pool_register: a few wait, more drop the client.
        s = connect(env.socket)
        hello(s, "batch-inference", gpu_uuid(0xfd))
        spare = os.open("/dev/null", os.O_RDONLY)
        try:
            for _ in range(40):
                socket.send_fds(s, [frame(STATUS)], [spare] * 4)
                recv_msg(s)
            refused = False
        except OSError:
            refused = True
        os.close(spare)
        check(refused, "a client passing more descriptors than it registers is dropped")
        check(wait_for(lambda: fd_count(d.pid) == baseline, 5), f"the descriptors it passed are closed "
              f"({fd_count(d.pid)} open, {baseline} before)")
        # Made-up GPUs: each hello creates the GPU's state, up to the cap; freed when its clients go.
        clients, refused = [], 0
        for n in range(80):
            c = connect(env.socket)
            kind, reply, fds = hello(c, "batch-inference", gpu_uuid(0x1000 + n))
            for fd in fds:
                os.close(fd)
            refused += kind == ERROR
            clients.append(c)
        holds = env.status()["daemon"]["holds"]
        check(holds["gpus"] <= 64 and refused == 80 - 64, f"64 GPUs tracked at most, the others refused "
              f"({holds['gpus']} tracked, {refused} refused)")
        for c in clients:
            c.close()
        holds = wait_for(lambda: (h := env.status()["daemon"]["holds"]) and h["gpus"] == 0 and h, 5)
        check(holds and holds["gpus"] == 0 and holds["clients"] == 1, f"no GPU state left once its clients left ({holds})")
        check(wait_for(lambda: fd_count(d.pid) == baseline, 5),
              f"tandemd holds as many descriptors as before ({fd_count(d.pid)}, {baseline} before)")
    finally:
        stop(d)
    # The same from a user allowed only batch-inference (training and inference are uid 65534's
    # alone): GPUs no training or inference process named are unverified, 2 per user at most.
    config = os.path.join(env.tmp, "filler-only.json")
    with open(config, "w") as f:
        json.dump({"roles": {"training": ["user:65534"], "inference": ["user:65534"]}}, f)
    d = env.popen([os.path.join(env.build, "bin", "tandemd"), "--foreground", "--socket", env.socket, "--log", "warn",
                   "--config", config], env=env.base, stderr=subprocess.PIPE, text=True)
    clients = []
    try:
        check(wait_for(lambda: os.path.exists(env.socket) and env.status() is not None, 5), "tandemd started again")
        errnos = []
        for n in range(64):
            c = connect(env.socket)
            kind, reply, fds = hello(c, "batch-inference", gpu_uuid(0x2000 + n))
            for fd in fds:
                os.close(fd)
            if kind == ERROR:
                errnos.append(reply["errno"])
            clients.append(c)
        check(len(errnos) == 62 and set(errnos) == {errno.EDQUOT},
              f"a filler-only user gets 2 made-up GPUs, then EDQUOT ({len(errnos)} refused: {sorted(set(errnos))})")
        gpus = env.status()["gpus"]
        check(len(gpus) == 2 and not any(g["verified"] for g in gpus), "both reported unverified")
    finally:
        for c in clients:
            c.close()
        stop(d)


def case_emfile(env):
    d = subprocess.Popen(["prlimit", "--nofile=32:32", os.path.join(env.build, "bin", "tandemd"), "--foreground",
                          "--socket", env.socket, "--log", "warn"], env=env.base, stderr=subprocess.PIPE, text=True)
    try:
        check(wait_for(lambda: os.path.exists(env.socket) and env.status() is not None, 5),
              "tandemd started with 32 descriptors")
        hogs = []
        for _ in range(120):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.setblocking(False)
            try:
                s.connect(env.socket)
            except (BlockingIOError, OSError):
                pass
            hogs.append(s)
        time.sleep(0.5)
        used = cpu_seconds(d.pid)
        time.sleep(2.0)
        used = cpu_seconds(d.pid) - used
        print(f"     tandemd used {used:.2f} s of CPU in 2 s with its descriptors exhausted")
        check(d.poll() is None, "tandemd is alive")
        check(used < 0.25, f"it does not spin on accept ({used:.2f} s CPU in 2 s < 0.25 s)")
        for s in hogs:
            s.close()
        check(wait_for(lambda: env.status() is not None, 5), "it serves again once descriptors are free")
    finally:
        stop(d)


def case_socket_path(env):
    tandemd = os.path.join(env.build, "bin", "tandemd")

    def start(path):
        return subprocess.Popen([tandemd, "--foreground", "--socket", path, "--log", "warn"], env=env.base,
                                stderr=subprocess.PIPE, text=True)

    # A regular file at the path is refused and left alone.
    precious = os.path.join(env.tmp, "precious.txt")
    with open(precious, "w") as f:
        f.write("keep me")
    d = start(precious)
    try:
        code = d.wait(timeout=10)
    except subprocess.TimeoutExpired:
        code = None
    err = d.stderr.read() if code is not None else ""
    stop(d)
    check(code not in (None, 0) and "not a socket" in err, f"a regular file at --socket is refused ({code}: {err.strip()})")
    with open(precious) as f:
        check(f.read() == "keep me", "and kept intact")
    # A live daemon's socket is refused.
    old = env.daemon()
    try:
        second = start(env.socket)
        code = second.wait(timeout=10)
        check(code != 0 and "already serving" in second.stderr.read(), "a second daemon on a live socket is refused")
        # The old daemon's socket is removed (by hand, or by a cleanup script) and a new daemon
        # takes the path; the old one exiting must not remove the new one's socket.
        os.unlink(env.socket)
        new = env.daemon()
        try:
            stop(old)
            check(os.path.exists(env.socket) and env.status() is not None,
                  "the new daemon's socket survived the old daemon's exit")
        finally:
            stop(new)
        check(not os.path.exists(env.socket), "a daemon removes its own socket at exit")
    finally:
        stop(old)


def case_names(env):
    d = env.daemon()
    try:
        # The name a user chose for their job, as any other user's tandemctl will show it.
        name = "j\nGPU forged: all idle\x1b[2J\x1b]0;owned\x07\u009b31m\u202etxet\x7f"
        s = connect(env.socket)
        kind, reply, fds = ask(s, HELLO, {"role": "training", "gpu": gpu_uuid(0x7e57), "job": name, "job_ranks": 2})
        check(kind == HELLO_OK, f"a training rank named its job ({reply})")
        for fd in fds:
            os.close(fd)
        ctl = os.path.join(env.build, "bin", "tandemctl")
        for args in (["status"], ["mem"]):
            out = subprocess.run([ctl, *args, "--socket", env.socket], capture_output=True, timeout=10)
            check(out.returncode == 0, f"tandemctl {args[0]} answers ({out.stderr.decode(errors='replace')[-300:]})")
            text = out.stdout.decode("utf-8")  # valid UTF-8 too
            bad = sorted({f"U+{ord(c):04X}" for c in text if c != "\n" and (ord(c) < 0x20 or 0x7f <= ord(c) <= 0x9f
                          or 0x202a <= ord(c) <= 0x202e or 0x2066 <= ord(c) <= 0x2069)})
            check(not bad, f"tandemctl {args[0]} prints no control character ({bad})")
            check(not any(line.startswith("GPU forged") for line in text.splitlines()),
                  f"tandemctl {args[0]} prints no forged line")
        out = subprocess.run([ctl, "status", "--socket", env.socket], capture_output=True, text=True, timeout=10).stdout
        job = [line for line in out.splitlines() if line.startswith("job ")]
        check(len(job) == 1 and "j\\nGPU forged" in job[0] and "\\x1b[2J" in job[0] and "\\u202e" in job[0],
              f"the job is one line with its controls shown as escapes: {job}")
        status = json.loads(subprocess.run([ctl, "status", "--json", "--socket", env.socket], capture_output=True,
                                           text=True, timeout=10).stdout)
        check([j["job"] for j in status["jobs"]] == [f"{os.getuid()}/{name}"], "status --json carries the name intact")
        s.close()
    finally:
        stop(d)


CASES = {"release-race": case_release_race, "pipeline": case_pipeline, "deaf": case_deaf, "fds": case_fds,
         "emfile": case_emfile, "socket-path": case_socket_path, "names": case_names}


if __name__ == "__main__":
    run_case(CASES)
