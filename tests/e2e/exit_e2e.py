#!/usr/bin/env python3
"""A training process that returns from main with a kernel still running (tests/fixtures/
exit_busy.cpp), registered with tandemd: the driver's exit teardown begins while tandem's
progress thread has a marker to poll, and no call of tandem's may reach the driver during it.
The simulated driver models the teardown (SIMGPU_EXIT_TEARDOWN_US, 20 ms here) and reports the
event calls made during it; a run whose own thread keeps querying through the exit shows that
the report works. docs/hook.md, "Exit"."""
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(__file__))
from e2e_util import Env, check, preload  # noqa: E402

REPORT = "driver calls during the driver's exit teardown"


def run(env, mode):
    """The fixture's exit code and stderr, let go once tandemd has it registered."""
    fixtures = os.path.join(env.build, "tests", "fixtures")
    e = dict(env.base, SIMGPU_EXIT_TEARDOWN_US="20000", LD_PRELOAD=preload(env.build), TANDEM_ROLE="training")
    p = env.popen([os.path.join(fixtures, "fixture_exit_busy"), os.path.join(fixtures, "fixture_kernels.fatbin"), mode],
                  env=e, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    check(env.registered(p) is not None, f"{mode}: the training process registered")
    _, err = p.communicate("exit\n", timeout=60)
    return p.returncode, err


def main():
    env = Env(sys.argv[1])
    d = env.daemon("fill")
    runs = []
    for _ in range(5):
        rc, err = run(env, "quiet")
        runs.append((rc, err))
        if rc != 0 or REPORT in err:
            break
    control_rc, control_err = run(env, "querying")
    d.terminate()
    d.wait()
    for rc, err in runs:
        print(f"quiet: rc {rc}, stderr {err.strip()[-300:]!r}")
    print(f"querying: rc {control_rc}, stderr {control_err.strip()[-300:]!r}")
    check(control_rc == 0 and REPORT in control_err,
          "the simulated driver reports a thread that queries an event during its exit teardown")
    check(all(rc == 0 for rc, _ in runs), "the program exits normally with its kernel running")
    check(all(REPORT not in err for _, err in runs),
          f"tandem made no driver call during the exit teardown ({len(runs)} runs)")


if __name__ == "__main__":
    main()
