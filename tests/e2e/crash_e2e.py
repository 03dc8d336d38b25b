#!/usr/bin/env python3
"""A fatal signal in tandemd writes a symbolized backtrace to stderr, then tandemd dies of that
signal (docs/scheduler.md). Cases:
  segv   a write through a null pointer (tandemd --crash-for-test segv)
  abort  std::abort (tandemd --crash-for-test abort)
  overflow  unbounded recursion: the report needs the alternate signal stack
Each also checks that the socket left behind is replaced by the next tandemd."""
import os
import re
import resource
import shutil
import signal
import subprocess
import sys

sys.path.insert(0, os.path.dirname(__file__))
from e2e_util import Env, check, wait_for  # noqa: E402

SIGNALS = {"segv": signal.SIGSEGV, "abort": signal.SIGABRT, "overflow": signal.SIGSEGV}


def no_core_dump():
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # the test wants the signal, not a core file


def main():
    build, case = sys.argv[1], sys.argv[2]
    sig = SIGNALS[case]
    env = Env(build)
    again = None
    try:
        d = subprocess.run([os.path.join(build, "bin", "tandemd"), "--foreground", "--socket", env.socket,
                            "--log", "warn", "--crash-for-test", case], env=env.base, capture_output=True, text=True,
                           timeout=30, preexec_fn=no_core_dump)
        err = d.stderr
        print(err)
        check(d.returncode == -sig, f"tandemd died of {sig.name} (returncode {d.returncode})")
        check(f"fatal signal {sig.name} ({int(sig)})" in err, f"stderr names {sig.name}")
        if case == "segv":
            check("at address 0x0," in err, "stderr gives the faulting address (null)")
        frames = re.findall(r"^tandemd:   #\d+ (\S+)\+0x[0-9a-f]+ pc 0x[0-9a-f]+$", err, re.M)
        own = [f for f in frames if "tandem" in f or f == "main"]
        check(len(own) >= 3, f"at least 3 symbolized frames are tandemd's own functions: {sorted(set(own))}")
        if case == "overflow":
            check(len([f for f in own if "recurse_for_test" in f]) >= 3 and "outer frames not shown" in err,
                  "the innermost frames are the recursion's; the outer ones are cut")
        else:
            check(any("crash_for_test" in f for f in own) and "main" in own,
                  "the frames run from main to the function that crashed")
        check(os.path.exists(env.socket), "the socket stays behind (not removed from a signal handler)")
        again = env.daemon()  # returns at once: the path exists; status tells when it is the new one's
        check(wait_for(lambda: env.status() is not None), "the next tandemd replaces the stale socket and answers")
        again.terminate()
        check(again.wait(timeout=10) == 0, "and exits cleanly on SIGTERM")
    finally:
        if again is not None and again.poll() is None:
            again.kill()
            again.wait()
        shutil.rmtree(env.tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
