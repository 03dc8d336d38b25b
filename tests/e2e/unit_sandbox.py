"""Runs a command as a systemd unit's [Service] section would, without systemd (a container
has no systemd as PID 1): the unit's user and group, no capabilities beyond its bounding set,
no new privileges, its umask and descriptor limit, its runtime directory, and the file-system
protections that are mounts (ProtectSystem=strict, ProtectHome, PrivateTmp, PrivateDevices,
ProcSubset=pid),
in a private mount namespace, and its SystemCallFilter= as a seccomp filter (when systemd's
tools and Python's seccomp module are there). What else is seccomp or a kernel namespace of
another kind (RestrictAddressFamilies, MemoryDenyWriteExecute, Protect*Kernel*, ...) is not
emulated: `EMULATED` names what is. Needs root and util-linux (unshare, setpriv)."""
import grp
import os
import pwd
import shlex
import shutil
import subprocess

# The [Service] keys applied here; any other key of the unit is left to systemd.
EMULATED = {"ExecStart", "User", "Group", "CapabilityBoundingSet", "AmbientCapabilities", "NoNewPrivileges",
            "RuntimeDirectory", "RuntimeDirectoryMode", "UMask", "ProtectSystem", "ProtectHome", "PrivateTmp",
            "PrivateDevices", "ProcSubset", "LimitNOFILE", "SystemCallFilter", "SystemCallArchitectures",
            "SystemCallErrorNumber"}
# What PrivateDevices=yes leaves in /dev (systemd.exec(5)).
PRIVATE_DEVICES = ["null", "zero", "full", "random", "urandom", "tty"]


def read_service(path):
    """The [Service] section as {key: value} (the last assignment of a key wins)."""
    section, service = None, {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line or line[0] in "#;":
                continue
            if line.startswith("["):
                section = line.strip("[]")
            elif section == "Service" and "=" in line:
                key, value = line.split("=", 1)
                service[key.strip()] = value.strip()
    return service


def yes(service, key):
    return service.get(key, "no").lower() in ("yes", "true", "1", "on", "strict", "full")


def runtime_directory(service):
    """The runtime directory's path, or None."""
    name = service.get("RuntimeDirectory")
    return os.path.join("/run", name) if name else None


def prepare_runtime_directory(service):
    """Makes the runtime directory as systemd does when the unit starts: owned by the unit's
    user and group, with RuntimeDirectoryMode (default 0755). Its path."""
    path = runtime_directory(service)
    if not path:
        return None
    os.makedirs(path, exist_ok=True)
    os.chown(path, pwd.getpwnam(service.get("User", "root")).pw_uid,
             grp.getgrnam(service["Group"]).gr_gid if "Group" in service else 0)
    os.chmod(path, int(service.get("RuntimeDirectoryMode", "0755"), 8))
    return path


# Runs in the sandbox after setpriv: loads a seccomp filter allowing the syscalls named in
# argv[1], separated by spaces (the unit's SystemCallFilter=, expanded by systemd itself), native architecture only
# (SystemCallArchitectures=native), then executes the rest of argv. Anything else kills the
# process, stricter than a SystemCallErrorNumber= would be, so that a missing syscall shows.
SECCOMP_EXEC = """
import os, sys, seccomp
f = seccomp.SyscallFilter(defaction=seccomp.KILL_PROCESS)
for name in sys.argv[1].split():
    try:
        f.add_rule(seccomp.ALLOW, name)
    except (RuntimeError, ValueError, OSError):
        pass  # a syscall of another architecture
f.load()
os.execv(sys.argv[2], sys.argv[2:])
"""


def syscall_groups():
    """systemd's syscall groups ({'@name': [entries]}), from `systemd-analyze syscall-filter`."""
    out = subprocess.run(["systemd-analyze", "syscall-filter"], capture_output=True, text=True, check=True).stdout
    groups, current = {}, None
    for line in out.splitlines():
        if line.startswith("@"):
            current = groups.setdefault(line.split()[0], [])
        elif current is not None and line.strip() and not line.strip().startswith("#"):
            current.append(line.split()[0])
    return groups


def expand_syscalls(spec, groups):
    """The syscall names a SystemCallFilter= allow-list names (groups expanded)."""
    names, todo = set(), spec.split()
    while todo:
        item = todo.pop()
        if item.startswith("@"):
            todo += [i for i in groups.get(item, []) if i not in names]
        names.add(item)
    return sorted(n for n in names if not n.startswith("@"))


def seccomp_available():
    """Why the syscall filter cannot be emulated, or None when it can."""
    if not shutil.which("systemd-analyze"):
        return "systemd-analyze is not installed (Debian's systemd package)"
    if subprocess.run(["/usr/bin/python3", "-c", "import seccomp"], capture_output=True).returncode != 0:
        return "Python's seccomp module is not installed (Debian's python3-seccomp)"
    return None


def sandbox_script(service, syscalls=None):
    """A shell script to run in a new mount namespace: the mounts, then exec of ExecStart
    under setpriv with the unit's credentials."""
    lines = ["set -e"]
    if yes(service, "PrivateDevices"):
        lines += ["devs=$(mktemp -d)", "mount -t tmpfs -o mode=755,nosuid,noexec tmpfs \"$devs\""]
        for d in PRIVATE_DEVICES:
            lines += [f"touch \"$devs/{d}\"", f"mount --bind /dev/{d} \"$devs/{d}\""]
        lines += ["mkdir \"$devs/shm\" \"$devs/pts\"", "mount --rbind /dev/shm \"$devs/shm\"",
                  "mount --move \"$devs\" /dev"]
    if service.get("ProcSubset") == "pid":  # a procfs of the processes only
        lines.append("mount -t proc -o subset=pid,nosuid,nodev,noexec proc /proc")
    if yes(service, "PrivateTmp"):
        lines += ["mount -t tmpfs -o mode=1777 tmpfs /tmp", "mount -t tmpfs -o mode=1777 tmpfs /var/tmp"]
    if yes(service, "ProtectHome"):
        for d in ("/home", "/root", "/run/user"):
            lines.append(f"[ ! -d {d} ] || mount -t tmpfs -o ro,mode=000 tmpfs {d}")
    run_dir = runtime_directory(service)
    if run_dir:  # stays writable under ProtectSystem=strict
        lines.append(f"mount --bind {run_dir} {run_dir}")
    if service.get("ProtectSystem") == "strict":
        # Every writable mount read-only, but the API file systems and the runtime directory.
        keep = ["/proc", "/sys", "/dev", run_dir or "/nonexistent"]
        if yes(service, "PrivateTmp"):  # private and writable, as systemd leaves them
            keep += ["/tmp", "/var/tmp"]
        lines += ["findmnt -rn -o TARGET,OPTIONS | while read -r target options; do",
                  "  case \"$options\" in ro,*|ro) continue;; esac",
                  "  case \"$target\" in " + "|".join(f"{k}|{k}/*" for k in keep) + ") continue;; esac",
                  "  mount -o remount,bind,ro \"$target\" 2>/dev/null || true",
                  "done"]
    if "UMask" in service:
        lines.append(f"umask {service['UMask']}")
    if "LimitNOFILE" in service:
        lines.append(f"ulimit -n {service['LimitNOFILE']} 2>/dev/null || true")
    setpriv = ["setpriv", f"--reuid={service.get('User', 'root')}"]
    setpriv.append(f"--regid={service['Group']}" if "Group" in service else "--regid=root")
    setpriv.append("--clear-groups")
    if "CapabilityBoundingSet" in service and not service["CapabilityBoundingSet"]:
        setpriv += ["--bounding-set=-all", "--inh-caps=-all"]
    if not service.get("AmbientCapabilities"):
        setpriv.append("--ambient-caps=-all")
    if yes(service, "NoNewPrivileges"):
        setpriv.append("--no-new-privs")
    if syscalls:
        setpriv += ["/usr/bin/python3", "-c", SECCOMP_EXEC, " ".join(syscalls)]
    lines.append("exec " + " ".join(shlex.quote(a) for a in setpriv) + " " + service["ExecStart"])
    return "\n".join(lines)


def start_unit(unit_path, syscalls=None, **popen):
    """Starts the unit's ExecStart in its sandbox; the Popen. The runtime directory is made in
    the caller's mount namespace, where its clients find it. With `syscalls` (allowed_syscalls),
    under that syscall filter."""
    service = read_service(unit_path)
    prepare_runtime_directory(service)
    return subprocess.Popen(["unshare", "-m", "--propagation", "private", "sh", "-c",
                             sandbox_script(service, syscalls)], **popen)


def allowed_syscalls(unit_path):
    """The syscalls the unit's SystemCallFilter= allows (systemd's groups expanded), or None
    when it has none."""
    spec = read_service(unit_path).get("SystemCallFilter")
    return expand_syscalls(spec, syscall_groups()) if spec else None


def not_emulated(unit_path):
    """The unit's [Service] keys this module leaves to systemd."""
    return sorted(set(read_service(unit_path)) - EMULATED - {"Type", "Restart", "RestartSec"})
