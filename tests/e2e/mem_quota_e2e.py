#!/usr/bin/env python3
"""tandemctl mem end to end on the simulated GPU: a quota set through tandemd reaches a
running process (its cuMemGetInfo/cuDeviceTotalMem and its allocations), `tandemctl mem`
shows use and quota, and bad requests get clear refusals.

usage: mem_quota_e2e.py BUILD_DIR KERNEL_IMAGE
"""
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from fill_e2e import Env, check  # noqa: E402


def ctl(env, *args):
    return subprocess.run([os.path.join(env.build, "bin", "tandemctl"), *args, "--socket", env.socket],
                          capture_output=True, text=True, timeout=10)


def main():
    build, image = sys.argv[1], sys.argv[2]
    env = Env(build)
    d = env.daemon()
    run_env = dict(env.base, LD_PRELOAD=os.path.join(build, "lib", "libtandem.so"), TANDEM_ROLE="training",
                   TANDEM_STATS_FILE=os.path.join(env.tmp, "stats-%p.json"))
    p = subprocess.Popen([os.path.join(build, "tests", "fixtures", "fixture_mem_quota"), "daemon", image, "32"],
                         env=run_env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        lines = iter(p.stdout.readline, "")
        check(any(line.strip() == "ready" for line in lines), "the process launched a kernel")
        rows = []
        for _ in range(100):  # registration happens on the process's progress thread
            out = ctl(env, "mem", "--json")
            rows = [r for r in json.loads(out.stdout)["processes"] if r["pid"] == p.pid] if out.returncode == 0 else []
            if rows:
                break
            time.sleep(0.05)
        check(len(rows) == 1 and rows[0]["quota_source"] == "none", f"tandemctl mem lists the process: {rows}")

        bad = ctl(env, "mem", "--set", str(p.pid), "12Q")
        check(bad.returncode == 2 and "K/M/G/T" in bad.stderr, f"an invalid size is refused: {bad.stderr.strip()}")
        nobody = ctl(env, "mem", "--set", "999999999", "1G")
        check(nobody.returncode == 1 and "not a registered client" in nobody.stderr,
              f"an unknown pid is refused: {nobody.stderr.strip()}")
        ok = ctl(env, "mem", "--set", str(p.pid), "32M")
        check(ok.returncode == 0, f"the quota is set: {ok.stdout.strip()} {ok.stderr.strip()}")

        for _ in range(100):  # the process publishes the quota in force every few ms
            rows = [r for r in json.loads(ctl(env, "mem", "--json").stdout)["processes"] if r["pid"] == p.pid]
            if rows and rows[0]["quota_bytes"] == 32 << 20:
                break
            time.sleep(0.05)
        check(rows and rows[0]["quota_bytes"] == 32 << 20 and rows[0]["quota_source"] == "tandemd",
              f"tandemctl mem shows the quota from tandemd: {rows}")
        table = ctl(env, "mem")
        check(table.returncode == 0 and str(p.pid) in table.stdout and "tandemd" in table.stdout,
              "tandemctl mem prints a table")

        out, err = p.communicate("go\n", timeout=30)
        check(p.returncode == 0 and "quota 33554432 held" in out, f"the process saw and kept the quota: {out} {err}")
        stats = json.load(open(os.path.join(env.tmp, f"stats-{p.pid}.json")))
        check(stats["memory"]["quota_refusals"] == 1 and stats["memory"]["quota_bytes"] == 32 << 20,
              f"its stats file agrees: {stats['memory']}")
    finally:
        if p.poll() is None:
            p.kill()
        d.terminate()
        d.wait()
    print("mem quota e2e: ok")


if __name__ == "__main__":
    main()
