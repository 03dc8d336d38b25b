#!/usr/bin/env python3
"""tandem as a distribution installs it (docs/install.md).

  layout   `cmake --install` into a DESTDIR with prefix /usr: exactly the expected files (the
           preload library under /usr/lib/tandem, tandemd in sbin, tandemctl in bin, the client
           header, the PyTorch helper, the docs, the systemd unit and /etc/tandem/tandemd.json),
           nothing of the simulated driver, the examples or the tests; the unit names the
           installed tandemd and its configuration
  deb      `cpack -G DEB` makes the package; `dpkg -i` installs it (the group `tandem` exists,
           the configuration is a conffile, `systemd-analyze verify` accepts the unit and
           `systemd-analyze security` rates its exposure at most 2.0, when that tool is
           present); tandemd runs as the unit would (its user, group, capabilities, runtime
           directory, file-system protections and syscall filter: unit_sandbox.py) and serves
           a hooked train-sim on the simulated GPU through /run/tandem/tandemd.sock, which
           /usr/bin/tandemctl shows; a second local user in the group tandem registers as
           training, outside it cannot connect (not even as batch-inference) and runs
           unmanaged; `dpkg -r` leaves only the conffile, `dpkg --purge` leaves nothing, not
           the group either. Also: deploy/docker/install-preload.sh, which the Dockerfile
           runs, puts only the library (and PyTorch's helper) from the package into an
           image's root and lists it once in its /etc/ld.so.preload

`deb` needs root (dpkg, mounts); otherwise it prints why and exits 77 (ctest: skipped). Its
/run/tandem is a private tmpfs of the test's own mount namespace, so a tandemd of the host is
never in the way.

usage: package_e2e.py BUILD_DIR layout|deb
"""
import grp
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
from e2e_util import check, remove_segments, wait_for  # noqa: E402
import unit_sandbox  # noqa: E402

SKIP = 77
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
UNIT = "/usr/lib/systemd/system/tandemd.service"
CONFIG = "/etc/tandem/tandemd.json"
LIBRARY = "/usr/lib/tandem/libtandem.so"
EXPOSURE_MAX = 20  # systemd-analyze security's --threshold: its exposure level times 10


def expected_files(build):
    """Every file a /usr install holds, relative to the DESTDIR."""
    files = {"usr/lib/tandem/libtandem.so", "usr/sbin/tandemd", "usr/bin/tandemctl", "usr/include/tandem/client.h",
             "usr/share/tandem/python/tandem_torch.py", "usr/share/tandem/python/tandem_microbatch.py",
             "usr/share/tandem/python/model_server.py", "usr/share/tandem/python/sirius_model.py",
             "usr/share/doc/tandem/README.md",
             "usr/share/doc/tandem/LICENSE", "usr/lib/systemd/system/tandemd.service", "etc/tandem/tandemd.json"}
    files |= {f"usr/share/doc/tandem/docs/{d}" for d in os.listdir(os.path.join(ROOT, "docs")) if d.endswith(".md")}
    if os.path.exists(os.path.join(build, "bin", "tandem-device-plugin")):  # built where gRPC is (docs/kubernetes.md)
        files.add("usr/sbin/tandem-device-plugin")
    return files


def installed_files(top):
    return {os.path.relpath(os.path.join(d, f), top) for d, _, fs in os.walk(top) for f in fs}


def layout_case(build):
    dest = tempfile.mkdtemp(prefix="tandem-install-")
    try:
        r = subprocess.run(["cmake", "--install", build, "--prefix", "/usr"], env=dict(os.environ, DESTDIR=dest),
                           capture_output=True, text=True, timeout=120)
        check(r.returncode == 0, f"cmake --install into a DESTDIR {r.stderr[-500:]}")
        files, want = installed_files(dest), expected_files(build)
        check(files == want, f"exactly the expected files (missing {sorted(want - files)}, extra {sorted(files - want)})")
        libraries = [f for f in files if ".so" in os.path.basename(f)]
        check(libraries == ["usr/lib/tandem/libtandem.so"], f"no library but libtandem.so (no simulated driver): {libraries}")
        for exe in ("usr/sbin/tandemd", "usr/bin/tandemctl"):
            check(os.stat(os.path.join(dest, exe)).st_mode & 0o111 != 0, f"{exe} is executable")
        service = unit_sandbox.read_service(os.path.join(dest, UNIT.lstrip("/")))
        check(service["ExecStart"].split()[0] == "/usr/sbin/tandemd", f"the unit runs /usr/sbin/tandemd: {service['ExecStart']}")
        check(f"--config {CONFIG}" in service["ExecStart"], "with /etc/tandem/tandemd.json")
        check(service.get("RuntimeDirectory") == "tandem", "RuntimeDirectory=tandem")
        with open(os.path.join(dest, CONFIG.lstrip("/"))) as f:
            config = json.load(f)
        check(config["socket"] == "/run/tandem/tandemd.sock" and config["socket_group"] == "tandem",
              "the configuration puts the socket in /run/tandem with group tandem")
        r = subprocess.run([os.path.join(dest, "usr/sbin/tandemd"), "--help"], capture_output=True, text=True)
        check(r.returncode == 0 and "--config" in r.stdout, "the installed tandemd runs")
        # Another prefix: everything under it, the configuration in PREFIX/etc.
        other = tempfile.mkdtemp(prefix="tandem-prefix-")
        r = subprocess.run(["cmake", "--install", build, "--prefix", other], capture_output=True, text=True, timeout=120)
        unit = unit_sandbox.read_service(os.path.join(other, "lib/systemd/system/tandemd.service"))
        check(r.returncode == 0 and unit["ExecStart"].startswith(f"{other}/sbin/tandemd --foreground --config {other}/etc/tandem/"),
              f"under another prefix the unit names that prefix's tandemd and config: {unit['ExecStart']}")
        shutil.rmtree(other)
    finally:
        shutil.rmtree(dest)


def dpkg(*args):
    """dpkg, waiting for its lock while another package manager holds it."""
    for _ in range(120):
        r = subprocess.run(["dpkg", *args], capture_output=True, text=True, timeout=300)
        if r.returncode == 0 or "lock" not in r.stderr:
            return r
        time.sleep(1)
    return r


def group_exists(name):
    try:
        grp.getgrnam(name)
        return True
    except KeyError:
        return False


def deb_case(build):
    if os.geteuid() != 0:
        print("SKIP: needs root (dpkg -i, a system group, mount namespaces)")
        raise SystemExit(SKIP)
    if dpkg("-s", "tandem").returncode == 0:
        print("SKIP: a package tandem is installed on this machine; this test installs and purges its own "
              "(dpkg --purge tandem, if it was left by a test run that was killed)")
        raise SystemExit(SKIP)
    group_before = group_exists("tandem")
    out = tempfile.mkdtemp(prefix="tandem-deb-")
    try:
        r = subprocess.run(["cpack", "-G", "DEB", "-B", out], cwd=build, capture_output=True, text=True, timeout=300)
        debs = [f for f in os.listdir(out) if f.endswith(".deb")]
        check(r.returncode == 0 and len(debs) == 1, f"cpack made one package: {debs} {r.stderr[-800:]}")
        deb = os.path.join(out, debs[0])
        info = subprocess.run(["dpkg-deb", "-f", deb, "Package", "Version", "Depends"], capture_output=True, text=True).stdout
        check("Package: tandem" in info and "Version: 0." in info and "libc6" in info,
              f"package tandem, the project's version, computed dependencies: {info.strip()!r}")
        image_recipe(deb)
        r = dpkg("-i", deb)
        check(r.returncode == 0, f"dpkg -i {debs[0]} {r.stderr[-800:]}")
        files = [l for l in dpkg("-L", "tandem").stdout.splitlines() if os.path.isfile(l)]
        check(LIBRARY in files and "/usr/sbin/tandemd" in files and UNIT in files, f"installed: {len(files)} files")
        check(group_exists("tandem"), "the group tandem exists")
        conffiles = subprocess.run(["dpkg-query", "-W", "-f=${Conffiles}", "tandem"], capture_output=True, text=True).stdout
        check(CONFIG in conffiles, f"{CONFIG} is a conffile")
        verify_unit()
        r = subprocess.run(["unshare", "-m", "--propagation", "private", sys.executable, __file__, build, "run-unit"],
                           timeout=180)
        check(r.returncode == 0, "the installed tandemd, run as its unit, serves a hooked program")
        r = dpkg("-r", "tandem")
        check(r.returncode == 0, f"dpkg -r tandem {r.stderr[-500:]}")
        left = [f for f in files if os.path.exists(f)]
        check(left == [CONFIG], f"after dpkg -r only the conffile is left: {left}")
        r = dpkg("--purge", "tandem")
        check(r.returncode == 0, f"dpkg --purge tandem {r.stderr[-500:]}")
        left = [f for f in files + ["/etc/tandem", "/var/lib/tandem"] if os.path.exists(f)]
        check(not left, f"after dpkg --purge nothing is left: {left}")
        check(dpkg("-s", "tandem").returncode != 0, "dpkg knows no package tandem")
        check(group_exists("tandem") == group_before, "the group is gone again" if not group_before else
              "the group, which was there before, is still there")
        if not group_before:  # an administrator's group survives a purge
            subprocess.run(["groupadd", "--system", "tandem"], check=True)
            try:
                check(dpkg("-i", deb).returncode == 0 and dpkg("--purge", "tandem").returncode == 0,
                      "installed and purged again with a group tandem made beforehand")
                check(group_exists("tandem"), "that group is still there")
            finally:
                subprocess.run(["groupdel", "tandem"], capture_output=True)
    finally:
        shutil.rmtree(out, ignore_errors=True)
        if dpkg("-s", "tandem").returncode == 0:
            dpkg("--purge", "tandem")


def image_recipe(deb):
    """deploy/docker's install-preload.sh, which the Dockerfile runs, into an image's root."""
    root = tempfile.mkdtemp(prefix="tandem-image-")
    try:
        os.makedirs(os.path.join(root, "etc"))
        with open(os.path.join(root, "etc/ld.so.preload"), "w") as f:
            f.write("/usr/lib/other/libother.so\n")
        script = os.path.join(ROOT, "deploy/docker/install-preload.sh")
        for _ in range(2):  # twice: the library is listed once
            r = subprocess.run(["sh", script, deb, root], capture_output=True, text=True, timeout=60)
            check(r.returncode == 0, f"install-preload.sh into an image root {r.stderr[-500:]}")
        check(sorted(installed_files(root)) == ["etc/ld.so.preload", LIBRARY.lstrip("/"),
                                                "usr/share/tandem/python/tandem_microbatch.py",
                                                "usr/share/tandem/python/tandem_torch.py"],
              f"the image gets the library and the PyTorch helpers only: {sorted(installed_files(root))}")
        with open(os.path.join(root, "etc/ld.so.preload")) as f:
            check(f.read().split() == ["/usr/lib/other/libother.so", LIBRARY],
                  "/etc/ld.so.preload keeps what it listed and names libtandem.so once")
        with open(os.path.join(ROOT, "deploy/docker/Dockerfile")) as f:
            check("install-preload.sh" in f.read(), "the Dockerfile installs through install-preload.sh")
    finally:
        shutil.rmtree(root)


def verify_unit():
    if not shutil.which("systemd-analyze"):
        print("skip systemd-analyze verify: not installed (Debian's systemd package)")
        return
    r = subprocess.run(["systemd-analyze", "verify", "--man=no", UNIT], capture_output=True, text=True, timeout=60)
    check(r.returncode == 0 and not (r.stdout + r.stderr).strip(),
          f"systemd-analyze verify {UNIT}: no complaint {(r.stdout + r.stderr)[-800:]}")
    # systemd's own score of the sandbox (0 best, 10 worst) must not get worse than 2.0.
    r = subprocess.run(["systemd-analyze", "security", "--offline=yes", f"--threshold={EXPOSURE_MAX}", UNIT],
                       capture_output=True, text=True, timeout=60)
    overall = [l for l in r.stdout.splitlines() if "Overall exposure" in l]
    check(r.returncode == 0 and overall, f"systemd-analyze security: {overall[-1] if overall else r.stderr[-300:]} "
                                         f"(at most {EXPOSURE_MAX / 10})")


def seen_roles(pid):
    """The roles /usr/bin/tandemctl shows for `pid` once it launches in a GPU slot, else None."""
    r = subprocess.run(["/usr/bin/tandemctl", "status", "--json"], capture_output=True, text=True, timeout=10)
    if r.returncode != 0:
        return None
    status = json.loads(r.stdout)
    slots = [s for g in status["gpus"] for s in g["slots"] if s["pid"] == pid and s["launches"] > 0]
    roles = [c["role"] for c in status["clients"] if c["pid"] == pid]
    return roles if slots else None


def group_members(build, env, gid):
    """The group tandem is who may use the socket: a user in it registers as training; a user
    outside it cannot connect and runs unmanaged, as without tandem."""
    from identity_e2e import OtherUser
    user = OtherUser()
    tmp = tempfile.mkdtemp(prefix="tandem-deb-user-")
    try:
        # What the user runs, copied where it can read it (the build may not be readable to it).
        train_sim, simgpu = user.share(tmp, os.path.join(build, "bin", "train-sim"), os.path.join(build, "simgpu"))
        for member in (True, False):
            # The user's own simulated GPU; outside the group, a role everyone who can connect may have.
            e = dict(env, SIMGPU_SHM=f"/simgpu-pkg-{os.getpid()}-{int(member)}", LD_LIBRARY_PATH=simgpu,
                     TANDEM_ROLE="training" if member else "batch-inference")
            p = subprocess.Popen([train_sim, "--iterations", "100"], env=e,
                                 user=user.uid, group=user.gid, extra_groups=[gid] if member else [],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            if member:
                roles = wait_for(lambda: seen_roles(p.pid), 20)
                check(roles == ["training"], f"{user.name}, in the group tandem, registers as training: {roles}")
                p.kill()
                p.communicate(timeout=60)
                continue
            seen = False
            deadline = time.monotonic() + 3
            while p.poll() is None and time.monotonic() < deadline:
                seen = seen or seen_roles(p.pid) is not None
                time.sleep(0.1)
            out, err = p.communicate(timeout=120)
            check(not seen, f"{user.name}, outside the group, cannot reach the socket: never seen, even as batch-inference")
            check(p.returncode == 0, f"and runs to the end unmanaged, as without tandem (exit {p.returncode}) {err[-300:]}")
    finally:
        user.remove()
        shutil.rmtree(tmp, ignore_errors=True)


def run_unit_case(build):
    """Inside the test's private mount namespace: a private /run/tandem, tandemd as the unit,
    train-sim preloaded with the installed library, tandemctl."""
    os.makedirs("/run/tandem", exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "mode=755", "tmpfs", "/run/tandem"], check=True)
    print("not emulated (left to systemd):", ", ".join(unit_sandbox.not_emulated(UNIT)))
    why_not = unit_sandbox.seccomp_available()
    syscalls = None if why_not else unit_sandbox.allowed_syscalls(UNIT)
    if why_not:
        print(f"skip the syscall filter: {why_not}")
    else:
        check(syscalls and "memfd_create" in syscalls and "chown" in syscalls,
              f"the unit's SystemCallFilter= allows {len(syscalls or [])} syscalls; tandemd runs under it "
              "(anything else kills it)")
    d = unit_sandbox.start_unit(UNIT, syscalls, stderr=subprocess.PIPE, text=True)
    sock = "/run/tandem/tandemd.sock"
    try:
        check(wait_for(lambda: os.path.exists(sock), 10), f"tandemd made {sock}")
        st, run_dir = os.stat(sock), os.stat("/run/tandem")
        gid = grp.getgrnam("tandem").gr_gid
        check(st.st_uid == 0 and st.st_gid == gid and stat.S_IMODE(st.st_mode) == 0o660,
              f"the socket is root:tandem 0660 ({st.st_uid}:{st.st_gid} {stat.S_IMODE(st.st_mode):o})")
        check(stat.S_IMODE(run_dir.st_mode) == 0o755 and run_dir.st_gid == gid, "/run/tandem is root:tandem 0755")
        with open(f"/proc/{d.pid}/status") as f:
            status = dict(l.split(":", 1) for l in f.read().splitlines() if ":" in l)
        # The unit's sandbox is the shell's, which exec'd setpriv, which exec'd tandemd.
        check(status["Name"].strip() == "tandemd" and int(status["CapEff"], 16) == 0 and
              int(status["CapBnd"], 16) == 0 and status["NoNewPrivs"].strip() == "1",
              f"tandemd has no capability and no new privileges (CapEff {status['CapEff'].strip()}, "
              f"CapBnd {status['CapBnd'].strip()}, NoNewPrivs {status['NoNewPrivs'].strip()})")
        with open(f"/proc/{d.pid}/mountinfo") as f:
            mounts = {l.split()[4]: (l.split()[5].split(",")[0], l.split(" - ")[1].split()[0]) for l in f}
        with open(f"/proc/{d.pid}/mountinfo") as f:
            proc_options = [l.split(" - ")[1].split()[2] for l in f if l.split()[4] == "/proc"]
        check(proc_options and "subset=pid" in proc_options[-1], f"its /proc holds processes only: {proc_options}")
        check(mounts["/"][0] == "ro" and mounts["/tmp"] == ("rw", "tmpfs") and mounts["/run/tandem"][0] == "rw",
              f"in tandemd's mount namespace / is read-only, /tmp private, /run/tandem writable "
              f"(/ {mounts['/']}, /tmp {mounts['/tmp']}, /run/tandem {mounts['/run/tandem']})")
        env = dict(os.environ, LD_LIBRARY_PATH=os.path.join(build, "simgpu"), SIMGPU_SHM=f"/simgpu-pkg-{os.getpid()}",
                   LD_PRELOAD=LIBRARY, TANDEM_ROLE="training")
        env.pop("TANDEM_SOCKET", None)  # the default: /run/tandem/tandemd.sock
        p = subprocess.Popen([os.path.join(build, "bin", "train-sim"), "--iterations", "400"], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

        roles = wait_for(lambda: seen_roles(p.pid), 20)
        check(roles == ["training"],
              f"/usr/bin/tandemctl status shows train-sim (pid {p.pid}) launching in a GPU slot as training: {roles}")
        status = json.loads(subprocess.run(["/usr/bin/tandemctl", "status", "--json"], capture_output=True,
                                           text=True, timeout=10).stdout)
        cgroups = [c["container"]["cgroup"] for c in status["clients"] if c["pid"] == p.pid]
        with open(f"/proc/{p.pid}/cgroup") as f:
            own = f.read()
        check(cgroups and cgroups[0] and cgroups[0] in own,
              f"tandemd read its cgroup through the restricted /proc: {cgroups}")
        p.kill()
        p.wait()
        group_members(build, env, gid)
    finally:
        d.terminate()
        try:
            _, err = d.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            d.kill()
            _, err = d.communicate()
        print("tandemd's log:", err[-1500:])
        remove_segments(f"/simgpu-pkg-{os.getpid()}")  # the simulated GPUs of train-sim and the group members
    check(d.returncode == 0, f"tandemd stopped cleanly on SIGTERM (exit {d.returncode})")
    check(not os.path.exists(sock), "and removed its socket")


def main():
    build, case = sys.argv[1], sys.argv[2]
    {"layout": layout_case, "deb": deb_case, "run-unit": run_unit_case}[case](os.path.abspath(build))


if __name__ == "__main__":
    main()
