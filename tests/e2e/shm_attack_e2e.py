#!/usr/bin/env python3
"""Attacks on tandem's shared memory and on the hook's link to tandemd (docs/scheduler.md,
include/tandem/shm_abi.h). Each case must fail on a tandem whose segment is an unsealed,
writable memfd or whose hook trusts what arrives at TANDEM_SOCKET.

  hostile-client  a client registers with a real tandemd, then tries to resize, write and
                  map writable the GPU's segment (each refused: EPERM), and fills its own page
                  with out-of-range values; tandemd survives, bounds them, and another
                  client's quota and gate are untouched.
  fake-daemon     a program that is not tandemd listens at TANDEM_SOCKET and answers hello
                  with garbage, a short segment, a wrong magic, a huge slot index, no fd, an
                  unsealed segment it shrinks afterwards, a huge slot count, or never answers;
                  a hooked CUDA program finishes normally each time.
  fork            a parent's thread holds the hook's exchange and pool locks (tandemd is slow
                  to answer a pool request) while another thread forks; the child uses CUDA
                  and finishes.
  restart         a training process whose queued work spans a tandemd restart writes only
                  plausible values to its new page (nothing recorded before the restart
                  completes into it).

usage: shm_attack_e2e.py BUILD_DIR KERNEL_IMAGE hostile-client|fake-daemon|fork|restart
"""
import ctypes
import errno
import json
import mmap
import os
import socket
import struct
import subprocess
import sys
import threading
import time

from e2e_util import PAGE_BYTES, Env, check

HELLO, HELLO_OK, POOL_ACQUIRE, POOL_GRANTED, POOL_REGISTER, POOL_REGISTERED, POOL_RELEASE, POOL_RELEASED, ERROR = (
    1, 2, 9, 11, 12, 13, 14, 15, 0xFFFF)
MAGIC, VERSION, SLOTS = 0x4D444E54, 4, 64
SLOT_BYTES, HEADER_BYTES = 128, 128 + 128 * 64
UUID = "00112233445566778899aabbccddeeff"


def send(sock, mtype, payload=b"", fds=()):
    data = struct.pack("<II", mtype, len(payload)) + payload
    if fds:
        socket.send_fds(sock, [data], list(fds))
    else:
        sock.sendall(data)


def recv_exact(sock, n):
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise EOFError
        data += chunk
    return data


def recv(sock):
    head, fds, _, _ = socket.recv_fds(sock, 8, 8)
    head += recv_exact(sock, 8 - len(head)) if len(head) < 8 else b""
    mtype, length = struct.unpack("<II", head)
    return mtype, recv_exact(sock, length) if length else b"", fds


def register(path, role="batch-inference"):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    send(s, HELLO, json.dumps({"pid": os.getpid(), "role": role, "gpu": UUID}).encode())
    mtype, payload, fds = recv(s)
    return s, mtype, json.loads(payload), fds


def refused(fn, *args):
    """The errno an OS call failed with, or None when it succeeded."""
    try:
        fn(*args)
    except OSError as e:
        return e.errno
    return None


# ---------------------------------------------------------------- hostile client
def benign_client(path):
    """A second registered client (own process): prints its slot, then on any stdin line the
    assigned quota and gate it reads from its read-only mapping of its slot."""
    s, mtype, reply, fds = register(path)
    seg = mmap.mmap(fds[0], HEADER_BYTES, mmap.MAP_SHARED, mmap.PROT_READ)
    slot = reply["slot"]
    print(json.dumps({"slot": slot}), flush=True)
    for _ in sys.stdin:
        base = 128 + slot * SLOT_BYTES
        gate, = struct.unpack_from("<I", seg, base + 16)
        quota, = struct.unpack_from("<Q", seg, base + 40)
        state, = struct.unpack_from("<I", seg, base)
        print(json.dumps({"gate": gate, "quota": quota, "state": state}), flush=True)


def hostile_client(env, build):
    d = env.daemon()
    benign = subprocess.Popen([sys.executable, __file__, build, "-", "benign-client", env.socket],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        benign_slot = json.loads(benign.stdout.readline())["slot"]
        out = subprocess.run([os.path.join(build, "bin", "tandemctl"), "mem", "--set", str(benign.pid), "1G",
                              "--socket", env.socket], capture_output=True, text=True, timeout=10)
        check(out.returncode == 0, f"tandemctl mem --set gave the other client 1 GiB: {out.stderr.strip()}")

        s, mtype, reply, fds = register(env.socket)
        check(mtype == HELLO_OK and len(fds) == 2, f"registered, with the segment and a page: {reply}, {len(fds)} fds")
        seg_fd, page_fd = fds
        check(os.fstat(seg_fd).st_size == HEADER_BYTES and os.fstat(page_fd).st_size == PAGE_BYTES,
              "the segment and the page have the layout's sizes")
        check(refused(os.ftruncate, seg_fd, 0) == errno.EPERM, "ftruncate(segment, 0) fails with EPERM")
        check(refused(os.ftruncate, seg_fd, 1 << 20) == errno.EPERM, "growing the segment fails with EPERM")
        check(refused(os.write, seg_fd, b"\xff" * 64) == errno.EPERM, "write(segment) fails with EPERM")
        check(refused(mmap.mmap, seg_fd, HEADER_BYTES, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
              == errno.EPERM, "mmap(segment, PROT_WRITE, MAP_SHARED) fails with EPERM")
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
        ro = libc.mmap(None, HEADER_BYTES, mmap.PROT_READ, mmap.MAP_SHARED, seg_fd, 0)
        check(ro not in (None, ctypes.c_void_p(-1).value), "a read-only mapping of the segment works")
        rc = libc.mprotect(ctypes.c_void_p(ro), HEADER_BYTES, mmap.PROT_READ | mmap.PROT_WRITE)
        check(rc != 0, f"mprotect(PROT_WRITE) of it fails (errno {ctypes.get_errno()})")
        check(refused(os.ftruncate, page_fd, 0) == errno.EPERM, "ftruncate(own page, 0) fails with EPERM")
        seg = mmap.mmap(seg_fd, HEADER_BYTES, mmap.MAP_SHARED, mmap.PROT_READ)
        magic, version = struct.unpack_from("<II", seg, 0)
        check(magic == MAGIC and version == VERSION, f"the segment is layout {version}")

        # Its own page is all it can write: out-of-range values, backwards counters, garbage.
        page = mmap.mmap(page_fd, PAGE_BYTES, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        deadline = time.monotonic() + 1.0
        i = 0
        while time.monotonic() < deadline:
            page[:] = (b"\xff" if i % 2 else b"\x00") * PAGE_BYTES
            struct.pack_into("<QQQ", page, 0, 2**63 + i, 0, 2**64 - 1)  # launches, nccl, issued_ns
            i += 1
            time.sleep(0.002)
        page[:] = b"\xff" * PAGE_BYTES
        time.sleep(0.2)
        check(d.poll() is None, "tandemd is alive")
        status = env.status()
        check(status is not None, "tandemd answers status")
        slots = {x["slot"]: x for g in status["gpus"] for x in g["slots"]}
        mine = slots.get(reply["slot"])
        check(mine is not None and mine["page_violations"] > 0, f"tandemd bounded the hostile page: {mine and mine['page_violations']}")
        check(mine["peak_bytes"] <= 1 << 50 and mine["requests_open"] <= 1 << 20,
              f"bounded values: peak {mine['peak_bytes']}, open {mine['requests_open']}")
        other = slots.get(benign_slot)
        check(other is not None and other["assigned_quota_bytes"] == 1 << 30 and other["page_violations"] == 0,
              f"the other client's quota is 1 GiB as set: {other and other['assigned_quota_bytes']}")
        benign.stdin.write("?\n")
        benign.stdin.flush()
        seen = json.loads(benign.stdout.readline())
        check(seen == {"gate": 0, "quota": 1 << 30, "state": 1}, f"the other client reads its slot intact: {seen}")
        s.close()
    finally:
        benign.kill()
        benign.wait()
        d.terminate()
        d.wait(timeout=10)


# ---------------------------------------------------------------- fake daemon
def memfd(size, data=b"", seal=True):
    fd = os.memfd_create("fake", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    os.ftruncate(fd, size)
    if data:
        os.pwrite(fd, data, 0)
    if seal:
        import fcntl
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL)
    return fd


def segment_bytes(magic=MAGIC, version=VERSION, slot_count=SLOTS, active_slot=0):
    header = struct.pack("<IIII", magic, version, HEADER_BYTES, slot_count) + bytes(16)
    header += struct.pack("<QQ", time.monotonic_ns(), 1000)  # heartbeat, sample_us
    data = bytearray(header.ljust(HEADER_BYTES, b"\0"))
    struct.pack_into("<IiI", data, 128 + active_slot * SLOT_BYTES, 1, os.getpid(), 3)  # active, pid, batch
    struct.pack_into("<I", data, 128 + active_slot * SLOT_BYTES + 16, 1)  # gate: tokens, none granted
    return bytes(data)


class FakeDaemon:
    """Listens at `path` and answers every hello as `mode` says; counts the hellos answered."""

    def __init__(self, path, mode):
        self.path, self.mode, self.hellos, self.pool_requests = path, mode, 0, 0
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(path)
        self.listener.listen(16)
        self.conns = []
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self):
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.conns.append(conn)
            threading.Thread(target=self.client, args=(conn, len(self.conns)), daemon=True).start()

    def client(self, conn, number):
        try:
            while True:
                mtype, payload, fds = recv(conn)
                for fd in fds:
                    os.close(fd)
                if mtype == HELLO:
                    self.hello(conn)
                    self.hellos += 1
                elif mtype in (POOL_ACQUIRE, POOL_REGISTER, POOL_RELEASE):
                    self.pool(conn, mtype, json.loads(payload), number)
        except (EOFError, OSError):
            pass

    def hello(self, conn):
        m = self.mode
        ok = json.dumps({"slot": 0, "sample_us": 1000}).encode()
        if m == "garbage":
            conn.sendall(os.urandom(8) + b"\x00" * 64)
        elif m == "huge-length":
            conn.sendall(struct.pack("<II", HELLO_OK, 0xFFFFFFF0))
        elif m == "bad-json":
            send(conn, HELLO_OK, b'{"slot": "zero"}', [memfd(HEADER_BYTES, segment_bytes()), memfd(PAGE_BYTES)])
        elif m == "no-fd":
            send(conn, HELLO_OK, ok)
        elif m == "short-segment":
            send(conn, HELLO_OK, ok, [memfd(64, segment_bytes()[:64]), memfd(PAGE_BYTES)])
        elif m == "wrong-magic":
            send(conn, HELLO_OK, ok, [memfd(HEADER_BYTES, segment_bytes(magic=0x12345678)), memfd(PAGE_BYTES)])
        elif m == "huge-slot":
            send(conn, HELLO_OK, json.dumps({"slot": 1 << 30}).encode(),
                 [memfd(HEADER_BYTES, segment_bytes(slot_count=(1 << 31))), memfd(PAGE_BYTES)])
        elif m == "huge-slot-count":  # a slot far past the mapping, "within" the claimed count
            send(conn, HELLO_OK, json.dumps({"slot": 5000000}).encode(),
                 [memfd(HEADER_BYTES, segment_bytes(slot_count=(1 << 30))), memfd(PAGE_BYTES)])
        elif m == "shrink-later":
            seg, page = memfd(HEADER_BYTES, segment_bytes(), seal=False), memfd(PAGE_BYTES, seal=False)
            send(conn, HELLO_OK, ok, [seg, page])
            time.sleep(0.3)  # mapped by now, if the hook took it
            os.ftruncate(seg, 0)
            os.ftruncate(page, 0)
        elif m == "silent":
            pass
        elif m in ("valid", "slow-pool"):
            send(conn, HELLO_OK, ok, [memfd(HEADER_BYTES, segment_bytes(version=VERSION)), memfd(PAGE_BYTES)])
        else:
            raise SystemExit(f"unknown mode {m}")

    def pool(self, conn, mtype, request, number):
        self.pool_requests += 1
        seq = request.get("seq", 0)
        if mtype == POOL_ACQUIRE and self.mode == "slow-pool" and number == 1:
            return  # the first client (the parent) never gets its chunks: its thread holds the locks
        if mtype == POOL_ACQUIRE:
            send(conn, POOL_GRANTED, json.dumps({"seq": seq, "chunks": 0, "short_bytes": request.get("bytes", 0),
                                                  "reason": "fake"}).encode())
        elif mtype == POOL_REGISTER:
            send(conn, POOL_REGISTERED, json.dumps({"seq": seq, "id": self.pool_requests}).encode())
        else:
            send(conn, POOL_RELEASED, json.dumps({"seq": seq, "released": 0}).encode())

    def close(self):
        self.listener.close()
        for c in self.conns:
            c.close()


FAKE_MODES = ["garbage", "huge-length", "bad-json", "no-fd", "short-segment", "wrong-magic", "huge-slot",
              "huge-slot-count", "shrink-later", "silent"]


def fake_daemon(env, build, image):
    for mode in FAKE_MODES:
        path = os.path.join(env.tmp, f"fake-{mode}.sock")
        fake = FakeDaemon(path, mode)
        env_vars = dict(env.base, TANDEM_SOCKET=path, LD_PRELOAD=os.path.join(build, "lib", "libtandem.so"),
                        TANDEM_ROLE="batch-inference", TANDEM_LOG="warn", FIXTURE_TMP=env.tmp)
        # Long enough for several link attempts (one a second): 1500 launches of 1 ms.
        start = time.monotonic()
        p = subprocess.run([os.path.join(build, "tests", "fixtures", "fixture_shm_attack"), image, "launch", "1500"],
                           env=env_vars, capture_output=True, text=True, timeout=60)
        took = time.monotonic() - start
        fake.close()
        check(fake.hellos >= 1, f"{mode}: the hooked program asked the fake daemon ({fake.hellos} hellos)")
        check(p.returncode == 0, f"{mode}: the hooked program finished normally in {took:.1f} s "
                                  f"(exit {p.returncode}) {p.stderr[-300:].strip()}")
        warnings = [l for l in p.stderr.splitlines() if "not a tandemd" in l]
        check(mode in ("silent",) or len(warnings) == 1, f"{mode}: said once: {warnings[:1]}")


# ---------------------------------------------------------------- fork
def fork_case(env, build, image):
    path = os.path.join(env.tmp, "fake-pool.sock")
    fake = FakeDaemon(path, "slow-pool")
    env_vars = dict(env.base, TANDEM_SOCKET=path, LD_PRELOAD=os.path.join(build, "lib", "libtandem.so"),
                    TANDEM_ROLE="training", TANDEM_MEM_POOL="1", TANDEM_MEM_HANDOVER_MS="3000", TANDEM_LOG="warn",
                    FIXTURE_TMP=env.tmp)
    start = time.monotonic()
    try:
        p = subprocess.run([os.path.join(build, "tests", "fixtures", "fixture_shm_attack"), image, "fork-held", "0"],
                           env=env_vars, capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired as e:  # the parent itself hung: say what it had printed
        fake.close()
        check(False, f"the forking process finished within 60 s; it printed: {e.stdout!r} {e.stderr!r}")
    fake.close()
    check(fake.pool_requests >= 1, f"the parent's pool asked the fake daemon for memory ({fake.pool_requests})")
    check(p.returncode == 0, f"the child used CUDA and exited while the parent's locks were held "
                              f"({time.monotonic() - start:.1f} s): {p.stdout.strip()} {p.stderr[-400:].strip()}")


# ---------------------------------------------------------------- restart
def restart_case(env, build, image):
    """Not an attack: the benign client must never look like one. A training process whose
    queued GPU work (1.6 s per iteration) spans a tandemd restart re-registers with a fresh
    page; markers recorded before it must not complete into that page."""
    d = env.daemon()
    train = env.start("train-sim", "--seconds", "6", "--kernel-us", "400000", "--compute-kernels", "4",
                      "--warmup", "0", "--mem-mb", "0", role="training")
    try:
        time.sleep(2.2)  # mid-iteration: markers are in flight
        d.kill()
        d.wait()
        time.sleep(0.2)
        d = env.daemon()
        linked = None
        for _ in range(60):
            status = env.status()
            linked = status and [s for g in status["gpus"] for s in g["slots"] if s["pid"] == train.pid]
            if linked:
                break
            time.sleep(0.05)
        check(bool(linked), "the training process registered with the new tandemd")
        time.sleep(2.5)  # the iteration in flight at the restart has completed
        status = env.status()
        slot = [s for g in status["gpus"] for s in g["slots"] if s["pid"] == train.pid][0]
        check(slot["page_violations"] == 0 and slot["markers_pending"] <= 64,
              f"its new page holds only plausible values ({slot['page_violations']} bounded, "
              f"last {slot['page_violation_last'] or 'none'}, "
              f"{slot['markers_pending']} markers pending)")
    finally:
        d.terminate()
        err = d.stderr.read()
        d.wait()
        train.kill()
        train.wait()
    check("implausible" not in err, f"the new tandemd logged nothing implausible: {err[-300:].strip()}")


def main():
    if len(sys.argv) >= 5 and sys.argv[3] == "benign-client":
        return benign_client(sys.argv[4])
    build, image, case = sys.argv[1], sys.argv[2], sys.argv[3]
    env = Env(build)
    if case == "hostile-client":
        hostile_client(env, build)
    elif case == "fake-daemon":
        fake_daemon(env, build, image)
    elif case == "fork":
        fork_case(env, build, image)
    elif case == "restart":
        restart_case(env, build, image)
    else:
        raise SystemExit(f"unknown case {case}")
    print(f"shm_attack_e2e {case}: ok")


if __name__ == "__main__":
    main()
