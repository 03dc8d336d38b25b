#!/usr/bin/env python3
"""Writes the fuzz harness's seed corpus (tests/fuzz/corpus/): one script per protocol path,
in the step format fuzz_daemon.cpp reads. Rerun after changing that format."""
import json
import os
import struct

GPU = "0123456789abcdef0123456789abcdef"
CHUNK = 2 * 1024 * 1024  # TANDEM_MEM_CHUNK in the harness
MSG, RAW, TICK, HANG_UP = 0, 1, 2, 3
MEMFD, DEVNULL, PIPE, THREE_MEMFDS, OWN_SOCKET, TWENTY_MEMFDS = 1, 2, 3, 4, 5, 6
TYPES = {"hello": 1, "status": 3, "trace": 5, "quota": 7, "pool_acquire": 9, "pool_register": 12,
         "pool_release": 14}


def op(kind, client=0, fds=0):
    return bytes([kind | client << 2 | fds << 4])


def msg(name, payload, client=0, fds=0):
    """payload: a dict (sent as JSON), a str, or bytes (sent as they are: not UTF-8, say)."""
    if isinstance(payload, bytes):
        body = payload
    else:
        text = payload if isinstance(payload, str) else json.dumps(payload).replace('"$PID"', "$PID")
        body = text.encode()
    return op(MSG, client, fds) + bytes([TYPES[name]]) + struct.pack("<H", len(body)) + body


def frame(name, text):
    return struct.pack("<II", TYPES[name], len(text)) + text.encode()


def raw(data, client=0, fds=0):
    return op(RAW, client, fds) + struct.pack("<H", len(data)) + data


def tick(ms, client=0):
    return op(TICK, client) + bytes([ms])


def hello(role, client=0, gpu=GPU):
    return msg("hello", {"pid": "$PID", "role": role, "gpu": gpu, "gpu_total_bytes": 1 << 30}, client)


SEEDS = {
    "control": hello("training") + msg("status", "{}") + msg("trace", {"since_ns": 0}) +
    msg("quota", {"pid": "$PID", "size": "8M"}) + msg("quota", {"pid": "$PID", "size": "25%"}) + tick(5),
    "no-gpu": msg("hello", {"pid": "$PID"}) + msg("status", "") + msg("hello", {"pid": "$PID"}),
    "pool-self": hello("batch-inference") + msg("pool_register", {"bytes": CHUNK}, fds=MEMFD) +
    msg("pool_release", {"ids": [1]}) + msg("pool_acquire", {"bytes": CHUNK, "chunk_bytes": CHUNK, "seq": 1}),
    # Training holds three chunks; inference needs two: tandemd lowers training's quota, training
    # gives them back, and they are handed over (or the wait times out on a tick).
    "pool-reclaim": hello("training", 0) + hello("inference", 1) +
    b"".join(msg("pool_register", {"bytes": CHUNK, "seq": i}, 0, MEMFD) for i in range(3)) +
    msg("pool_release", {"ids": [1, 2, 3]}, 0) + msg("pool_acquire", {"bytes": CHUNK, "chunk_bytes": CHUNK}, 0) +
    msg("pool_acquire", {"bytes": 4 * CHUNK, "chunk_bytes": CHUNK, "wait_ms": 20}, 1) + tick(10) +
    msg("pool_release", {"ids": [4]}, 0) + tick(100) + msg("status", "{}", 2) + op(HANG_UP, 1) + tick(1),
    "pool-crash": hello("inference", 0) + msg("pool_register", {"bytes": CHUNK}, 0, THREE_MEMFDS) +
    op(HANG_UP, 0) + hello("training", 0) + msg("pool_acquire", {"bytes": CHUNK, "chunk_bytes": CHUNK}, 0),
    "framing": raw(struct.pack("<II", 3, 2)[:5]) + raw(struct.pack("<II", 3, 2)[5:] + b"{}") +
    raw(struct.pack("<II", 1, 0x7FFFFFFF), 1) + msg("status", "{}", 2, TWENTY_MEMFDS) +
    msg("hello", "not json", 2, OWN_SOCKET) + msg("pool_register", "{}", 2, PIPE),
    # Inference waits for memory, then, not reading its replies, gives back a chunk of its own:
    # the wait is served at once, and the chunk cannot be sent to a socket that is full.
    "pool-release-unread": hello("training", 0) + hello("inference", 1) +
    msg("pool_register", {"bytes": CHUNK}, 0, THREE_MEMFDS) + msg("pool_register", {"bytes": CHUNK}, 1, MEMFD) +
    msg("pool_acquire", {"bytes": 3 * CHUNK, "chunk_bytes": CHUNK}, 1) +
    raw(b"".join(frame("status", "{}") for _ in range(12)) + frame("pool_release", '{"ids": [2]}'), 1),
    # Numbers where the daemon wants unsigned integers: floats out of range, negatives.
    "float-fields": msg("hello", {"pid": "$PID", "role": "inference", "gpu": GPU, "gpu_total_bytes": 1e300}) +
    msg("trace", {"since_ns": 1e30}) + hello("inference") + msg("pool_register", {"bytes": 1e30}, fds=MEMFD) +
    msg("pool_acquire", {"bytes": -1e30, "chunk_bytes": 2.5e19, "seq": -1.5, "wait_ms": 1e40}),
    # Names a client chooses reach every other user's status and terminal (docs/security.md):
    # a job name that is not UTF-8 (refused: not JSON), one with a newline, escape sequences, a
    # C1 control and a right-to-left override (taken: two ranks form the job), then the status
    # and the trace, whose replies must stay JSON.
    "job-names": msg("hello", b'{"pid":$PID,"role":"training","gpu":"' + GPU.encode() +
                     b'","gpu_total_bytes":1073741824,"job":"\xff\xfe-\xc3(","job_ranks":2}') +
    msg("hello", b'{"pid":$PID,"role":"\xff","gpu":"' + GPU.encode() + b'"}', 1) +
    b"".join(msg("hello", {"pid": "$PID", "role": "training", "gpu": GPU, "gpu_total_bytes": 1 << 30,
                           "job": "j\nGPU forged\u001b[2J\u001b]0;owned\u0007\u009b31m\u202etxet", "job_ranks": 2},
                 client) for client in (0, 1)) +
    tick(2) + msg("status", "{}", 2) + msg("trace", {"since_ns": 0}, 2) + op(HANG_UP, 1) + msg("status", "{}", 2),
}

out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")
os.makedirs(out, exist_ok=True)
for name, data in SEEDS.items():
    with open(os.path.join(out, name), "wb") as f:
        f.write(data)
