#!/usr/bin/env python3
"""tandemctl mem end to end on the simulated GPU.

  quota     a quota set through tandemd reaches a running process (its cuMemGetInfo,
            cuDeviceTotalMem and allocations), `tandemctl mem` shows use and quota, and bad
            requests get clear refusals
  pressure  lowering the quota under what a process holds calls its memory-pressure
            callback, which releases its cache: the process ends under the quota
  python    the same through examples/pytorch/tandem_torch.py (ctypes), with a stand-in for
            PyTorch's cache

usage: mem_quota_e2e.py BUILD_DIR KERNEL_IMAGE quota|pressure|python
"""
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(__file__))
from fill_e2e import Env, check  # noqa: E402
from e2e_util import ctl, mem_row, preload, stats_file, wait_for  # noqa: E402


def start_fixture(env, image, mode, mib):
    run_env = dict(env.base, LD_PRELOAD=preload(env.build), TANDEM_ROLE="training",
                   TANDEM_STATS_FILE=os.path.join(env.tmp, "stats-%p.json"))
    if mode == "python":
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        cmd = [sys.executable, os.path.join(os.path.dirname(__file__), "pressure_client.py"), image, root]
    else:
        cmd = [os.path.join(env.build, "tests", "fixtures", "fixture_mem_quota"), mode, image, str(mib)]
    p = subprocess.Popen(cmd, env=run_env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    check(any(line.strip() == "ready" for line in iter(p.stdout.readline, "")), f"the {mode} process is running")
    # Registration happens on the process's progress thread, shortly after its first launch.
    row = wait_for(lambda: mem_row(env, p.pid))
    check(row is not None and row["quota_source"] == "none", f"tandemctl mem lists the process: {row}")
    return p, row


def stats_of(env, pid):
    return stats_file(env, pid)["memory"]


def quota_case(env, image):
    p, _ = start_fixture(env, image, "daemon", 32)
    bad = ctl(env, "mem", "--set", str(p.pid), "12Q")
    check(bad.returncode == 2 and "K/M/G/T" in bad.stderr, f"an invalid size is refused: {bad.stderr.splitlines()[0]}")
    nobody = ctl(env, "mem", "--set", "999999999", "1G")
    check(nobody.returncode == 1 and "not a registered client" in nobody.stderr,
          f"an unknown pid is refused: {nobody.stderr.strip()}")
    ok = ctl(env, "mem", "--set", str(p.pid), "32M")
    check(ok.returncode == 0, f"the quota is set: {ok.stdout.strip()} {ok.stderr.strip()}")
    row = wait_for(lambda: (r := mem_row(env, p.pid)) and r["quota_bytes"] == 32 << 20 and r)
    check(row and row["quota_source"] == "tandemd", f"tandemctl mem shows the quota from tandemd: {row}")
    table = ctl(env, "mem")
    check(table.returncode == 0 and str(p.pid) in table.stdout and "tandemd" in table.stdout,
          "tandemctl mem prints a table")
    out, err = p.communicate("go\n", timeout=30)
    check(p.returncode == 0 and "quota 33554432 held" in out, f"the process saw and kept the quota: {out} {err}")
    mem = stats_of(env, p.pid)
    check(mem["quota_refusals"] == 1 and mem["quota_bytes"] == 32 << 20, f"its stats file agrees: {mem}")


def pressure_case(env, image):
    p, row = start_fixture(env, image, "pressure", 32)
    held = wait_for(lambda: (r := mem_row(env, p.pid)) and r["bytes_in_use"] == 56 << 20 and r)
    check(held, f"the process holds 48 MiB of cache and 8 MiB of data: {mem_row(env, p.pid)}")
    ok = ctl(env, "mem", "--set", str(p.pid), "32M")
    check(ok.returncode == 0, "the quota is lowered to 32 MiB, under the 56 MiB held")
    out, err = p.communicate(timeout=30)
    check(p.returncode == 0 and "released" in out, f"the callback released the cache: {out} {err}")
    mem = stats_of(env, p.pid)
    check(mem["pressure_calls"] >= 1 and mem["reported_release_bytes"] == 48 << 20 and mem["bytes_in_use"] == 0,
          f"its stats file counts the call and the release: {mem}")


def python_case(env, image):
    p, _ = start_fixture(env, image, "python", 0)
    held = wait_for(lambda: (r := mem_row(env, p.pid)) and r["bytes_in_use"] == 48 << 20 and r)
    check(held, f"the Python process holds its 48 MiB cache: {mem_row(env, p.pid)}")
    check(ctl(env, "mem", "--set", str(p.pid), "16M").returncode == 0, "the quota is lowered to 16 MiB")
    out, err = p.communicate(timeout=30)
    check(p.returncode == 0 and "released" in out, f"tandem_torch's callback released the cache: {out} {err}")
    mem = stats_of(env, p.pid)
    check(mem["reported_release_bytes"] == 48 << 20 and mem["bytes_in_use"] == 0,
          f"the release was reported through the client API: {mem}")


def main():
    build, image, case = sys.argv[1], sys.argv[2], sys.argv[3]
    env = Env(build)
    d = env.daemon()
    try:
        {"quota": quota_case, "pressure": pressure_case, "python": python_case}[case](env, image)
    finally:
        d.terminate()
        d.wait()
    print(f"mem quota e2e {case}: ok")


if __name__ == "__main__":
    main()
