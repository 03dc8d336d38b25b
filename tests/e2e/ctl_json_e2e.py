#!/usr/bin/env python3
"""`tandemctl <command> --json` against a running tandemd: one JSON document on stdout, with the
information of the text output (docs/scheduler.md). One case per command:
  status    the daemon's status document: this test's registered client is in it
  mem       each process's memory: the registered client's row, quota_source none
  mem-set   the quota it set (assigned_quota_bytes), seen by `mem --json`; a refusal: stderr only
  trace     what it wrote while a training process ran: the file, its event count, events per GPU
  settings  every setting of the text output, with default, accepted and description
  version   the version of the text output
  top       one snapshot of the live view: the registered client's row with its role and GPU
  durations time flags as people write them: `trace --seconds 500ms` records half a second,
            `top --interval 200ms` answers; a value that is no time, or out of range, is a
            usage error naming the flag and the value
The registered client is this script itself (a raw hello over the socket, as a batch-inference
process on a made-up GPU)."""
import json
import os
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from e2e_util import Env, check  # noqa: E402
from hostile_daemon_e2e import HELLO_OK, connect, gpu_uuid, hello, stop  # noqa: E402

GPU = gpu_uuid(0xc71)


def ctl(env, *args, ok=True):
    p = subprocess.run([os.path.join(env.build, "bin", "tandemctl"), *args, "--socket", env.socket],
                       capture_output=True, text=True, timeout=30)
    if ok and p.returncode != 0:
        raise SystemExit(f"FAIL: tandemctl {' '.join(args)} exited with {p.returncode}: {p.stderr}")
    return p


def ctl_json(env, *args):
    """The one JSON document tandemctl printed (one line, nothing else on stdout)."""
    out = ctl(env, *args, "--json").stdout
    check(out.endswith("\n") and out.count("\n") == 1, f"tandemctl {' '.join(args)} --json prints one line")
    return json.loads(out)


def case_status(env):
    doc = ctl_json(env, "status")
    check(any(c["pid"] == os.getpid() and c["role"] == "batch-inference" for c in doc["clients"]),
          "status --json lists the registered client with its role")
    check(any(g["uuid"] == GPU for g in doc["gpus"]), "and its GPU")
    check(doc["daemon"]["socket"] == env.socket, "and the daemon's socket")


def case_mem(env):
    doc = ctl_json(env, "mem")
    rows = [r for r in doc["processes"] if r["pid"] == os.getpid()]
    check(len(rows) == 1 and rows[0]["gpu"] == GPU, f"mem --json has the client's row on its GPU: {rows}")
    check(rows[0]["quota_source"] == "none" and rows[0]["quota_bytes"] == 0, "with no quota")
    check(isinstance(doc["pools"], list), "and the list of pools")


def case_mem_set(env):
    doc = ctl_json(env, "mem", "--set", str(os.getpid()), "3M")
    check(doc == {"pid": os.getpid(), "gpu": GPU, "assigned_quota_bytes": 3 << 20},
          f"mem --set --json gives the quota tandemd assigned: {doc}")
    row = next(r for r in ctl_json(env, "mem")["processes"] if r["pid"] == os.getpid())
    check(row["quota_source"] == "tandemd", f"mem --json then shows the quota from tandemd: {row}")
    doc = ctl_json(env, "mem", "--set", str(os.getpid()), "none")
    check(doc["assigned_quota_bytes"] == 0, f"mem --set none --json: cleared ({doc})")
    refused = ctl(env, "mem", "--set", "999999999", "1G", "--json", ok=False)
    check(refused.returncode == 1 and refused.stdout == "" and "not a registered client" in refused.stderr,
          "a refusal with --json: status 1, nothing on stdout, the reason on stderr")


def case_trace(env):
    # Something to record: a training process on the simulated GPU, its iterations busy phases
    # and bubbles (a registered client that launches nothing changes no phase), running across
    # the whole trace.
    train = env.start("train-sim", "--seconds", "20", "--kernel-us", "200", "--compute-kernels", "20",
                      "--comm-us", "2000", "--gap-us", "8000", role="training")
    st = env.registered(train)
    check(st is not None, "a training process registered")
    uuid = next(g["uuid"] for g in st["gpus"] if any(x["pid"] == train.pid for x in g["slots"]))
    path = os.path.join(env.tmp, "trace.json")
    out = ctl(env, "trace", "--seconds", "1.5", "--out", path, "--json").stdout
    train.kill()
    train.wait()
    check(out.count("\n") == 1, f"trace --json prints one line: {out!r}")
    doc = json.loads(out)
    with open(path) as f:
        written = json.load(f)
    check(doc["out"] == path and doc["seconds"] == 1.5, f"trace --json names the file and the span: {doc}")
    check(doc["events"] == len(written["traceEvents"]) and doc["events"] >= 2, "its event count is the file's")
    check(doc["gpus"].get(uuid, 0) >= 2 and sum(doc["gpus"].values()) == doc["events"],
          f"events per GPU add up to it, the training GPU's among them: {doc['gpus']}")


def case_settings(env):
    doc = ctl_json(env, "settings")
    text = ctl(env, "settings").stdout
    names = [l.split()[0] for l in text.splitlines() if l.startswith("TANDEM_")]
    check([s["name"] for s in doc["settings"]] == names and names, "settings --json has every setting, in order")
    log = next(s for s in doc["settings"] if s["name"] == "TANDEM_SOCKET")
    check(all(log[k] is not None for k in ("default", "accepted", "description")) and log["description"] in text,
          "each with default, accepted values and description")
    both = ctl(env, "settings", "--json", "--markdown", ok=False)
    check(both.returncode == 2 and both.stdout == "", "--json with --markdown is a usage error")


def case_version(env):
    doc = ctl_json(env, "version")
    check(ctl(env, "version").stdout.strip() == f"tandemctl {doc['version']}", f"version --json: {doc}")


def case_top(env):
    doc = ctl_json(env, "top", "--interval", "0.2")
    rows = [r for r in doc["processes"] if r["pid"] == os.getpid()]
    check(len(rows) == 1 and rows[0]["role"] == "batch-inference" and rows[0]["gpu"] == GPU,
          f"top --json has the client's row with its role and GPU: {rows}")
    check(any(g["uuid"] == GPU for g in doc["gpus"]) and doc["interval_s"] > 0, "and its GPU, with rates")


def case_durations(env):
    path = os.path.join(env.tmp, "trace.json")
    started = time.monotonic()
    doc = ctl_json(env, "trace", "--seconds", "500ms", "--out", path)
    took = time.monotonic() - started
    check(doc["seconds"] == 0.5 and doc["out"] == path, f"trace --seconds 500ms records 0.5 s: {doc}")
    check(took >= 0.5, f"and waited that long ({took:.2f} s)")
    with open(path) as f:
        check("traceEvents" in json.load(f), "the trace file was written")
    doc = ctl_json(env, "top", "--interval", "200ms")
    check(doc["interval_s"] > 0, f"top --interval 200ms answers: interval {doc['interval_s']}")
    for flag, value in (("--seconds", "5parsecs"), ("--seconds", "0"), ("--seconds", "99999999999999999999"),
                        ("--seconds", "-1"), ("--interval", "1us")):
        command = "trace" if flag == "--seconds" else "top"
        p = ctl(env, command, flag, value, "--out", path, "--json", ok=False) if command == "trace" else \
            ctl(env, command, flag, value, "--json", ok=False)
        check(p.returncode == 2 and p.stdout == "" and flag in p.stderr and f"'{value}'" in p.stderr,
              f"{command} {flag} {value}: a usage error naming both ({p.returncode}: {p.stderr.splitlines()[:1]})")


CASES = {"status": case_status, "top": case_top, "mem": case_mem, "mem-set": case_mem_set, "trace": case_trace,
         "settings": case_settings, "version": case_version, "durations": case_durations}


def main():
    build, case = sys.argv[1], sys.argv[2]
    env = Env(build)
    d = env.daemon()
    try:
        client = connect(env.socket)
        check(hello(client, "batch-inference", GPU)[0] == HELLO_OK, "a client registered")
        CASES[case](env)
        client.close()
    finally:
        stop(d)
        shutil.rmtree(env.tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
