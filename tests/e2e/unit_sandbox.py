"""Runs a command as a systemd unit's [Service] section would, without systemd (a container
has no systemd as PID 1): the unit's user and group, no capabilities beyond its bounding set,
no new privileges, its umask and descriptor limit, its runtime directory, and the file-system
protections that are mounts (ProtectSystem=strict, ProtectHome, PrivateTmp, PrivateDevices,
ProcSubset=pid),
in a private mount namespace. What is seccomp or a kernel namespace of another kind
(RestrictAddressFamilies, SystemCallArchitectures, MemoryDenyWriteExecute, Protect*Kernel*,
...) is not emulated: `EMULATED` names what is. Needs root and util-linux (unshare, setpriv)."""
import grp
import os
import pwd
import shlex
import subprocess

# The [Service] keys applied here; any other key of the unit is left to systemd.
EMULATED = {"ExecStart", "User", "Group", "CapabilityBoundingSet", "AmbientCapabilities", "NoNewPrivileges",
            "RuntimeDirectory", "RuntimeDirectoryMode", "UMask", "ProtectSystem", "ProtectHome", "PrivateTmp",
            "PrivateDevices", "ProcSubset", "LimitNOFILE"}
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


def sandbox_script(service):
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
    lines.append("exec " + " ".join(shlex.quote(a) for a in setpriv) + " " + service["ExecStart"])
    return "\n".join(lines)


def start_unit(unit_path, **popen):
    """Starts the unit's ExecStart in its sandbox; the Popen. The runtime directory is made in
    the caller's mount namespace, where its clients find it."""
    service = read_service(unit_path)
    prepare_runtime_directory(service)
    return subprocess.Popen(["unshare", "-m", "--propagation", "private", "sh", "-c", sandbox_script(service)],
                            **popen)


def not_emulated(unit_path):
    """The unit's [Service] keys this module leaves to systemd."""
    return sorted(set(read_service(unit_path)) - EMULATED - {"Type", "Restart", "RestartSec"})
