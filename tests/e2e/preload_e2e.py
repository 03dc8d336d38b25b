#!/usr/bin/env python3
"""tandem through /etc/ld.so.preload, as a container image installs it (docs/install.md): in a
private mount namespace a preload file naming libtandem.so is bind-mounted over
/etc/ld.so.preload, so every program started there loads tandem without LD_PRELOAD; tandemd
runs there too (and carries the library, unused).

  cuda       an unmodified CUDA program (train-sim on the simulated GPU, TANDEM_ROLE=training)
             has libtandem mapped and registers with tandemd, which sees its launches
  twice      the same with LD_PRELOAD naming another copy of the library as well: two copies
             are mapped, one works, the program registers once
  torch      a PyTorch program (the project's .venv) is hooked the same way; skipped, saying
             why, without the venv or when torch does not import there
  untouched  programs that never use CUDA (/bin/true, a shell, Python without torch) run
             with libtandem mapped and TANDEM_LOG=debug, TANDEM_ROLE, TANDEM_STATS_FILE set,
             yet print nothing of tandem, start no thread, open no descriptor or socket, load
             no libcuda, write no statistics and never appear at tandemd
  setuid     the loader preloads tandem into setuid programs too, with the caller's
             environment: a setuid-root program that uses the driver, run by a second local
             user with TANDEM_REAL_LIBCUDA naming the user's own library, does not load it
             (nor write TANDEM_STATS_FILE) and says once that settings are ignored; without
             the setuid bit the same settings apply
  exceptions (no namespace, no root) exceptions inside libtandem work without libstdc++'s
             emergency arena, which the library no longer reserves at load: a fake tandemd's
             ill-typed refusals are thrown on and caught, and the preloaded program finishes

The others need root (mount namespaces; setuid: useradd and a C compiler); otherwise it prints why and exits 77 (ctest: skipped).
/etc/ld.so.preload is never changed outside the namespace: when it does not exist, a copy of
/etc with the preload file is mounted over /etc there.

usage: preload_e2e.py BUILD_DIR cuda|twice|torch|untouched|setuid|exceptions
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
from e2e_util import Env, check, wait_for  # noqa: E402
from torch_e2e import PYTHON as VENV_PYTHON, require_torch  # noqa: E402

SKIP = 77
INSIDE = "TANDEM_PRELOAD_E2E_INSIDE"

# A torch program knowing nothing of tandem: matrix products until told to stop.
TORCH_PROGRAM = """
import os, sys, time, torch
a = torch.randn(128, 128, device="cuda")
stop = sys.argv[1]
deadline = time.monotonic() + 120
while not os.path.exists(stop) and time.monotonic() < deadline:
    for _ in range(10):
        a = torch.tanh(a @ a)
    torch.cuda.synchronize()
print("done", flush=True)
"""

# What a process that never uses CUDA looks like from inside, under the preloaded library.
SELF_REPORT = """
import json, os, sys, time
maps = open("/proc/self/maps").read()
fds = {}
for fd in os.listdir("/proc/self/fd"):
    try:
        fds[fd] = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:  # the directory listdir itself had open
        pass
report = {"tandem_mapped": "libtandem.so" in maps, "libcuda_mapped": "libcuda" in maps,
          "threads": len(os.listdir("/proc/self/task")), "fds": sorted(fds.values()),
          "pid": os.getpid()}
print(json.dumps(report), flush=True)
time.sleep(float(sys.argv[1]))
"""


def enter_namespace(build, case):
    """Re-runs this test in a private mount namespace whose /etc/ld.so.preload names
    libtandem.so."""
    if os.geteuid() != 0:
        print("SKIP: needs root (a private mount namespace to bind-mount /etc/ld.so.preload)")
        raise SystemExit(SKIP)
    if shutil.which("unshare") is None:
        print("SKIP: unshare (util-linux) is not installed")
        raise SystemExit(SKIP)
    r = subprocess.run(["unshare", "-m", "--propagation", "private", sys.executable, __file__, build, case],
                       env=dict(os.environ, **{INSIDE: "1"}))
    raise SystemExit(r.returncode)


def mount_preload_file(library, tmp):
    preload = os.path.join(tmp, "ld.so.preload")
    with open(preload, "w") as f:
        f.write(library + "\n")
    if os.path.exists("/etc/ld.so.preload"):
        subprocess.run(["mount", "--bind", preload, "/etc/ld.so.preload"], check=True)
        open(os.path.join(tmp, "mounted-file"), "w").close()
        return
    # No file to mount over: a copy of /etc, with the file, over /etc (this namespace only).
    etc = os.path.join(tmp, "etc")
    os.makedirs(etc)
    subprocess.run(["mount", "-t", "tmpfs", "tmpfs", etc], check=True)
    subprocess.run(["cp", "-a", "/etc/.", etc], check=True)
    shutil.copy(preload, os.path.join(etc, "ld.so.preload"))
    subprocess.run(["mount", "--bind", etc, "/etc"], check=True)


def environment(env, **extra):
    """The simulated GPU and tandemd's socket, and no LD_PRELOAD: the preload file does it."""
    e = dict(env.base, **extra)
    e.pop("LD_PRELOAD", None)
    return e


def mapped(pid, name):
    try:
        with open(f"/proc/{pid}/maps") as f:
            return name in f.read()
    except OSError:
        return False


def slot_of(env, pid):
    """(role, launches) of `pid` at tandemd, or None while it is not registered."""
    status = env.status()
    if not status:
        return None
    slots = [s for g in status["gpus"] for s in g["slots"] if s["pid"] == pid]
    roles = [c["role"] for c in status["clients"] if c["pid"] == pid]
    return (roles[0] if roles else None, slots[0]["launches"]) if slots else None


def cuda_case(env):
    p = subprocess.Popen([os.path.join(env.build, "bin", "train-sim"), "--iterations", "400"],
                         env=environment(env, TANDEM_ROLE="training"), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        seen = wait_for(lambda: (slot_of(env, p.pid) or (None, 0))[1] > 0 and slot_of(env, p.pid), 20)
        check(mapped(p.pid, "libtandem.so"), "train-sim, started without LD_PRELOAD, has libtandem.so mapped")
        check(bool(seen) and seen[0] == "training", f"tandemd sees it registered as training, launching: {seen}")
    finally:
        p.kill()
        p.communicate()


def twice_case(env):
    """A program given LD_PRELOAD with another copy of the library on top of /etc/ld.so.preload
    (an image that preloads it, run by someone who also sets LD_PRELOAD) has two copies
    loaded: only one of them works, and the program registers once."""
    copy = os.path.join(env.tmp, "copy", "libtandem.so")
    os.makedirs(os.path.dirname(copy))
    shutil.copy(os.path.join(env.build, "lib", "libtandem.so"), copy)
    p = subprocess.Popen([os.path.join(env.build, "bin", "train-sim"), "--iterations", "60"],
                         env=dict(environment(env, TANDEM_ROLE="training", TANDEM_LOG="info"), LD_PRELOAD=copy),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen = wait_for(lambda: (slot_of(env, p.pid) or (None, 0))[1] > 0 and slot_of(env, p.pid), 20)
    with open(f"/proc/{p.pid}/maps") as f:
        copies = {l.split()[-1] for l in f if l.rstrip().endswith("libtandem.so")}
    status = env.status() or {"clients": []}
    clients = [c for c in status["clients"] if c["pid"] == p.pid]
    out, err = p.communicate(timeout=120)
    check(len(copies) == 2, f"two copies are mapped: {sorted(copies)}")
    check(bool(seen) and len(clients) == 1, f"the program registers once: {clients}")
    check(err.count("bootstrapped") == 1 and err.count("registered with tandemd") == 1,
          f"one copy bootstraps and registers: {err.strip()[-400:]!r}")
    check(p.returncode == 0, f"and it finishes (exit {p.returncode})")


def torch_case(env):
    require_torch()
    stop = os.path.join(env.tmp, "stop")
    p = subprocess.Popen([VENV_PYTHON, "-c", TORCH_PROGRAM, stop], env=environment(env, TANDEM_ROLE="batch-inference"),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # Until it launches, or exits early (then its stderr says why).
        seen = wait_for(lambda: p.poll() is not None or ((slot_of(env, p.pid) or (None, 0))[1] > 0
                                                         and slot_of(env, p.pid)), 240)
        if p.poll() is not None:
            raise SystemExit(f"FAIL: the PyTorch program exited ({p.returncode}): {p.communicate()[1][-1500:]}")
        check(mapped(p.pid, "libtandem.so"), "the PyTorch program has libtandem.so mapped")
        check(bool(seen) and seen[0] == "batch-inference", f"tandemd sees it registered, launching: {seen}")
        open(stop, "w").close()
        out, err = p.communicate(timeout=120)
        check(p.returncode == 0 and "done" in out, f"it finishes ({p.returncode}) {err[-1500:]}")
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()


def untouched_case(env):
    stats = os.path.join(env.tmp, "stats-%p.json")
    e = environment(env, TANDEM_ROLE="training", TANDEM_LOG="debug", TANDEM_STATS_FILE=stats)
    for cmd in (["/bin/true"], ["/bin/sh", "-c", "echo hello; ls / > /dev/null"]):
        r = subprocess.run(cmd, env=e, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=30)
        check(r.returncode == 0 and "tandem" not in r.stdout + r.stderr and r.stderr == "",
              f"{' '.join(cmd)}: runs, prints nothing of tandem ({r.stdout!r} {r.stderr!r})")
    python = "/usr/bin/python3"
    p = subprocess.Popen([python, "-c", SELF_REPORT, "2"], env=e, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    first = p.stdout.readline()
    time.sleep(0.5)
    registered = slot_of(env, p.pid) is not None or any(
        c["pid"] == p.pid for c in (env.status() or {"clients": []})["clients"])
    out, err = p.communicate(timeout=30)
    check(first.startswith("{"), f"{python} reports on itself ({p.returncode}: {err[-1000:]!r})")
    report = json.loads(first)
    check(report["tandem_mapped"], f"{python} has libtandem.so mapped (the preload file took effect)")
    check(not report["libcuda_mapped"], "and no libcuda")
    check(report["threads"] == 1, f"no thread of tandem's ({report['threads']} threads)")
    extra = [f for f in report["fds"] if not f.startswith("pipe:") and not f.startswith("/dev/")
             and not f.startswith("/proc/")]
    check(not extra, f"no descriptor of tandem's: no socket, no file ({report['fds']})")
    check(not registered, "tandemd never saw it")
    check(p.returncode == 0 and err == "", f"nothing on stderr: {err[-500:]!r}")
    check(not [f for f in os.listdir(env.tmp) if f.startswith("stats-")], "no statistics file written")


# A setuid-root program that uses CUDA (it asks the driver for its memory), and a "driver" a
# user would like root to load: its constructor leaves a file behind.
SETUID_PROGRAM = r"""
#include <dlfcn.h>
#include <stdio.h>
int main(void) {
  int (*mem_get_info)(size_t*, size_t*) = (int (*)(size_t*, size_t*))dlsym(RTLD_DEFAULT, "cuMemGetInfo_v2");
  size_t free_bytes = 0, total = 0;
  int r = mem_get_info ? mem_get_info(&free_bytes, &total) : -1;
  printf("cuMemGetInfo_v2: %d\n", r);
  return 0;
}
"""
IMPOSTOR_DRIVER = r"""
#include <stdio.h>
#include <stdlib.h>
__attribute__((constructor)) static void loaded(void) {
  FILE* f = fopen(getenv("MARKER"), "w");
  if (f) fclose(f);
}
"""


def setuid_case(env, library):
    """/etc/ld.so.preload loads tandem into setuid programs too, with the caller's environment:
    there no TANDEM_* setting may count (TANDEM_REAL_LIBCUDA would make root load any library,
    TANDEM_STATS_FILE write any file). `library`, which the preload file names, is a copy the
    second user can read (the build may not be readable to it)."""
    from identity_e2e import OtherUser
    os.chmod(env.tmp, 0o755)
    program, impostor, marker = (os.path.join(env.tmp, n) for n in ("probe-setuid", "impostor.so", "user/marker"))
    for source, out, extra in ((SETUID_PROGRAM, program, ["-ldl"]), (IMPOSTOR_DRIVER, impostor, ["-shared", "-fPIC"])):
        r = subprocess.run(["cc", "-x", "c", "-", "-o", out, *extra], input=source, capture_output=True, text=True)
        check(r.returncode == 0, f"compiled {os.path.basename(out)} {r.stderr[-500:]}")
    os.chmod(program, 0o4755)  # setuid root
    user = OtherUser()
    marker_dir = os.path.dirname(marker)
    os.makedirs(marker_dir)
    os.chown(marker_dir, user.uid, user.gid)
    try:
        user.require_reach([library, program])
        e = environment(env, TANDEM_REAL_LIBCUDA=impostor, TANDEM_LOG="debug", MARKER=marker,
                        TANDEM_STATS_FILE=os.path.join(env.tmp, "stats-setuid.json"))
        p = user.popen([program], e, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        out, err = p.communicate(timeout=30)
        check(p.returncode == 0 and "cuMemGetInfo_v2:" in out, f"the setuid program ran as {user.name}: {out!r} {err[-500:]!r}")
        check(not os.path.exists(marker), "tandem did not load TANDEM_REAL_LIBCUDA as root")
        check(not os.path.exists(os.path.join(env.tmp, "stats-setuid.json")), "nor write TANDEM_STATS_FILE")
        check(err.count("TANDEM_* settings are ignored") == 1, f"it says why, once: {err.strip()[-300:]!r}")
        # The same program without the setuid bit: the user's own settings apply to the user's process.
        os.chmod(program, 0o755)
        p = user.popen([program], e, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        p.communicate(timeout=30)
        check(os.path.exists(marker), "without setuid, the user's TANDEM_REAL_LIBCUDA is loaded (as the user)")
    finally:
        user.remove()


def exceptions_case(env):
    """libtandem links libstdc++'s exception allocator without its load-time arena
    (src/hook/CMakeLists.txt): exceptions thrown and caught inside the library still work. A
    fake tandemd refuses every hello with an error whose fields have the wrong JSON types,
    which the library's reading of the refusal throws on and catches; train-sim, preloaded
    the ordinary way, asks again each second and finishes normally."""
    import socket
    import struct
    import threading
    path = os.path.join(env.tmp, "fake.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(8)
    answered = []

    def serve():
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                header = conn.recv(8, socket.MSG_WAITALL)
                if len(header) == 8:
                    conn.recv(struct.unpack("<II", header)[1], socket.MSG_WAITALL)
                    body = json.dumps({"errno": "thirteen", "message": 5}).encode()
                    conn.sendall(struct.pack("<II", 0xFFFF, len(body)) + body)
                    answered.append(1)

    threading.Thread(target=serve, daemon=True).start()
    e = dict(env.base, TANDEM_SOCKET=path, LD_PRELOAD=os.path.join(env.build, "lib", "libtandem.so"),
             TANDEM_ROLE="training")
    r = subprocess.run([os.path.join(env.build, "bin", "train-sim"), "--iterations", "60"], env=e,
                       capture_output=True, text=True, timeout=120)
    listener.close()
    check(len(answered) >= 2, f"the fake tandemd refused {len(answered)} hellos with ill-typed errors")
    check(r.returncode == 0,
          f"train-sim finished normally (exit {r.returncode}) {r.stderr[-500:]}")


def main():
    build, case = os.path.abspath(sys.argv[1]), sys.argv[2]
    if case not in ("cuda", "twice", "torch", "untouched", "setuid", "exceptions"):
        raise SystemExit(f"unknown case {case}")
    if case == "exceptions":  # no namespace, no root
        env = Env(build)
        exceptions_case(env)
        shutil.rmtree(env.tmp, ignore_errors=True)
        return
    if not os.environ.get(INSIDE):
        enter_namespace(build, case)
    env = Env(build)
    library = os.path.join(build, "lib", "libtandem.so")
    if case == "setuid":  # a second user loads it: a copy it can read (the build may not be)
        from identity_e2e import copies_for_others
        library = copies_for_others(env.tmp, library)[0]
    mount_preload_file(library, env.tmp)
    with open("/etc/ld.so.preload") as f:
        check(f.read().strip() == library, f"/etc/ld.so.preload names {library} (in this namespace)")
    d = env.daemon()
    try:
        check(mapped(d.pid, "libtandem.so"), "tandemd itself loads the library too")
        {"cuda": cuda_case, "twice": twice_case, "torch": torch_case, "untouched": untouched_case,
         "setuid": lambda env: setuid_case(env, library)}[case](env)
        check(d.poll() is None, "tandemd is still running")
    finally:
        d.terminate()
        d.wait(timeout=10)
        subprocess.run(["umount", "-l", "/etc/ld.so.preload" if os.path.isfile(os.path.join(env.tmp, "mounted-file"))
                        else "/etc"], capture_output=True)
        subprocess.run(["umount", "-l", os.path.join(env.tmp, "etc")], capture_output=True)
        shutil.rmtree(env.tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
