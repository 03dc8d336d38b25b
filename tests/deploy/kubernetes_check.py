#!/usr/bin/env python3
"""The Kubernetes manifests of deploy/kubernetes, checked without a cluster (docs/deploy.md):

  * every object against the Kubernetes API schema of the oldest and newest version we
    support (kubernetes-validate, strict: an unknown field is an error), the ServiceMonitor
    against a schema of the Prometheus Operator's fields that we use (the validator has no
    schemas of custom resources);
  * what a schema cannot see: names that refer to each other (volumes, ports, selectors, the
    ConfigMap), the kustomization's list against the files, tandemd's configuration (parsed by
    tandemd itself), the example pods' TANDEM_* variables against the settings table
    (`tandemctl settings --json`), the library and socket they mount against the DaemonSet's,
    and the DaemonSet's privileges (hostPID, not privileged, limits, probes, metrics port).

Cases:
  valid   the repository's manifests have no problem
  broken  each of a list of breakages (a misspelt field, a wrong type, a ServiceMonitor port
          that names nothing, ...) is reported; and a broken copy of the directory makes the
          check itself exit 1 (`check DIR`)

The validator is installed by scripts/setup.sh into BUILD_DIR/python-kubernetes; without it
the test is skipped (exit 77) and says why.

usage: kubernetes_check.py BUILD_DIR valid|broken
       kubernetes_check.py BUILD_DIR check MANIFEST_DIR
"""
import copy
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
MANIFESTS = os.path.join(REPO, "deploy", "kubernetes")
SKIP = 77
# The oldest Kubernetes we support and the newest the validator knows.
VERSIONS = ("1.28", None)
DURATION = r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$"

# The ServiceMonitor fields tandem's manifest may use, with their types (monitoring.coreos.com/v1).
_RELABEL = {"type": "object", "additionalProperties": False,
            "properties": {"sourceLabels": {"type": "array", "items": {"type": "string"}},
                           "separator": {"type": "string"}, "targetLabel": {"type": "string"},
                           "regex": {"type": "string"}, "modulus": {"type": "integer"},
                           "replacement": {"type": "string"},
                           "action": {"enum": ["replace", "Replace", "keep", "Keep", "drop", "Drop", "hashmod",
                                               "HashMod", "labelmap", "LabelMap", "labeldrop", "LabelDrop",
                                               "labelkeep", "LabelKeep", "lowercase", "Lowercase", "uppercase",
                                               "Uppercase", "keepequal", "KeepEqual", "dropequal", "DropEqual"]}}}
_SELECTOR = {"type": "object", "additionalProperties": False,
             "properties": {"matchLabels": {"type": "object", "additionalProperties": {"type": "string"}},
                            "matchExpressions": {"type": "array", "items": {
                                "type": "object", "required": ["key", "operator"], "additionalProperties": False,
                                "properties": {"key": {"type": "string"}, "operator": {"type": "string"},
                                               "values": {"type": "array", "items": {"type": "string"}}}}}}}
SERVICE_MONITOR_SCHEMA = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "additionalProperties": False,
    "properties": {
        "apiVersion": {"const": "monitoring.coreos.com/v1"},
        "kind": {"const": "ServiceMonitor"},
        "metadata": {"type": "object", "required": ["name"],
                     "properties": {"name": {"type": "string", "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"},
                                    "namespace": {"type": "string"},
                                    "labels": {"type": "object", "additionalProperties": {"type": "string"}}}},
        "spec": {
            "type": "object", "required": ["selector", "endpoints"], "additionalProperties": False,
            "properties": {
                "selector": _SELECTOR,
                "namespaceSelector": {"type": "object", "additionalProperties": False,
                                      "properties": {"any": {"type": "boolean"},
                                                     "matchNames": {"type": "array", "items": {"type": "string"}}}},
                "jobLabel": {"type": "string"},
                "targetLabels": {"type": "array", "items": {"type": "string"}},
                "podTargetLabels": {"type": "array", "items": {"type": "string"}},
                "sampleLimit": {"type": "integer", "minimum": 0},
                "endpoints": {"type": "array", "minItems": 1, "items": {
                    "type": "object", "additionalProperties": False,
                    "properties": {"port": {"type": "string"}, "path": {"type": "string", "pattern": "^/"},
                                   "scheme": {"enum": ["http", "https", "HTTP", "HTTPS"]},
                                   "interval": {"type": "string", "pattern": DURATION},
                                   "scrapeTimeout": {"type": "string", "pattern": DURATION},
                                   "honorLabels": {"type": "boolean"},
                                   "relabelings": {"type": "array", "items": _RELABEL},
                                   "metricRelabelings": {"type": "array", "items": _RELABEL}}}}}}}}

# The Kustomization fields tandem's kustomization.yaml may use (kustomize.config.k8s.io/v1beta1).
KUSTOMIZATION_SCHEMA = {
    "type": "object", "required": ["apiVersion", "kind", "resources"], "additionalProperties": False,
    "properties": {
        "apiVersion": {"const": "kustomize.config.k8s.io/v1beta1"},
        "kind": {"const": "Kustomization"},
        "namespace": {"type": "string"},
        "resources": {"type": "array", "items": {"type": "string"}},
        "images": {"type": "array", "items": {
            "type": "object", "required": ["name"], "additionalProperties": False,
            "properties": {"name": {"type": "string"}, "newName": {"type": "string"},
                           "newTag": {"type": "string"}, "digest": {"type": "string"}}}},
        "labels": {"type": "array", "items": {"type": "object"}}}}


def load_validator(build):
    target = os.path.join(build, "python-kubernetes")
    if not os.path.isdir(os.path.join(target, "kubernetes_validate")):
        print(f"SKIP: no Kubernetes schema validator in {target} (scripts/setup.sh installs it)")
        sys.exit(SKIP)
    sys.path.insert(0, target)


def load_manifests(directory):
    """{relative path: [objects]} for every YAML file under `directory`."""
    import yaml
    out = {}
    for root, _, files in os.walk(directory):
        for name in sorted(files):
            if name.endswith((".yaml", ".yml")):
                path = os.path.join(root, name)
                with open(path) as f:
                    out[os.path.relpath(path, directory)] = [d for d in yaml.safe_load_all(f) if d is not None]
    return out


def objects(manifests, kind=None):
    for path, docs in sorted(manifests.items()):
        for d in docs:
            if isinstance(d, dict) and (kind is None or d.get("kind") == kind):
                yield path, d


def name_of(d):
    return f"{d.get('kind')}/{(d.get('metadata') or {}).get('name')}"


def schema_problems(manifests):
    import jsonschema
    import kubernetes_validate
    from kubernetes_validate import utils
    latest = utils.latest_version()
    problems = []
    for path, d in objects(manifests):
        custom = {"Kustomization": KUSTOMIZATION_SCHEMA, "ServiceMonitor": SERVICE_MONITOR_SCHEMA}.get(d.get("kind"))
        if custom:
            for e in jsonschema.Draft202012Validator(custom).iter_errors(d):
                problems.append(f"{path}: {name_of(d)}: {'.'.join(map(str, e.path))}: {e.message}")
            continue
        for version in VERSIONS:
            try:
                kubernetes_validate.validate(d, version or latest, strict=True)
            except utils.ValidationError as e:
                problems.append(f"{path}: {name_of(d)} against Kubernetes {version or latest}: "
                                f"{'.'.join(map(str, e.path))}: {e.message}")
            except utils.SchemaNotFoundError:
                problems.append(f"{path}: {name_of(d)}: no schema for {d.get('apiVersion')} {d.get('kind')}")
    return problems


def pod_spec(d):
    return d["spec"]["template"]["spec"] if d.get("kind") == "DaemonSet" else d.get("spec", {})


def containers(spec):
    return spec.get("initContainers", []) + spec.get("containers", [])


def mount_of(spec, container, path):
    """The volume mounted at the directory holding `path` in `container`, or None."""
    volumes = {v.get("name"): v for v in spec.get("volumes", [])}
    for m in container.get("volumeMounts", []):
        if os.path.dirname(path) == m.get("mountPath", "").rstrip("/"):
            return volumes.get(m.get("name"))
    return None


def reference_problems(manifests, build):
    problems = []
    say = problems.append
    daemonsets = [d for _, d in objects(manifests, "DaemonSet")]
    if len(daemonsets) != 1:
        return [f"expected one DaemonSet, found {len(daemonsets)}"]
    ds = daemonsets[0]
    ds_spec = pod_spec(ds)
    ds_labels = ds["spec"]["template"]["metadata"].get("labels", {})
    host_paths = {v["name"]: v["hostPath"]["path"] for v in ds_spec.get("volumes", []) if "hostPath" in v}

    # Volumes named by mounts exist, in every pod.
    for path, d in objects(manifests):
        if d.get("kind") in ("DaemonSet", "Pod"):
            declared = {v.get("name") for v in pod_spec(d).get("volumes", [])}
            for c in containers(pod_spec(d)):
                for m in c.get("volumeMounts", []):
                    if m.get("name") not in declared:
                        say(f"{path}: {name_of(d)}: container {c.get('name')} mounts volume {m.get('name')!r}, "
                            f"which the pod does not declare")

    # The DaemonSet: as privileged as needed and no more; bounded; probed; metrics.
    if ds_spec.get("hostPID") is not True:
        say("DaemonSet: hostPID must be true (tandemd names clients by their host pid)")
    for c in containers(ds_spec):
        sc = c.get("securityContext", {})
        if sc.get("privileged") or sc.get("allowPrivilegeEscalation") is not False:
            say(f"DaemonSet: container {c.get('name')} must not be privileged nor allow privilege escalation")
        if set(sc.get("capabilities", {}).get("drop", [])) != {"ALL"}:
            say(f"DaemonSet: container {c.get('name')} must drop ALL capabilities")
        for kind in ("requests", "limits"):
            if not {"cpu", "memory"} <= set(c.get("resources", {}).get(kind, {})):
                say(f"DaemonSet: container {c.get('name')} needs cpu and memory {kind}")
    daemon = next((c for c in ds_spec.get("containers", []) if c.get("name") == "tandemd"), None)
    if daemon is None:
        return problems + ["DaemonSet: no container named tandemd"]
    command = daemon.get("command", []) + daemon.get("args", [])
    socket = None
    for probe in ("livenessProbe", "readinessProbe"):
        cmd = daemon.get(probe, {}).get("exec", {}).get("command", [])
        if cmd[:2] != ["tandemctl", "status"] or "--socket" not in cmd:
            say(f"DaemonSet: {probe} must run `tandemctl status --socket PATH`")
            continue
        socket = cmd[cmd.index("--socket") + 1]
        if host_paths.get((mount_of(ds_spec, daemon, socket) or {}).get("name")) is None:
            say(f"DaemonSet: {probe}'s socket {socket} is not on a hostPath volume")
    ports = {p.get("name"): p.get("containerPort") for p in daemon.get("ports", [])}
    if ports.get("metrics") != 9433:
        say("DaemonSet: tandemd needs containerPort 9433 named metrics")
    if "--metrics" not in command or not command[command.index("--metrics") + 1].endswith(":9433"):
        say("DaemonSet: tandemd must serve --metrics on port 9433")

    # tandemd's configuration, from the ConfigMap it mounts, parsed by tandemd itself.
    config = {}
    if "--config" in command:
        config_path = command[command.index("--config") + 1]
        volume = mount_of(ds_spec, daemon, config_path) or {}
        maps = {d["metadata"]["name"]: d for _, d in objects(manifests, "ConfigMap")}
        cm = maps.get(volume.get("configMap", {}).get("name"))
        key = os.path.basename(config_path)
        if cm is None or key not in cm.get("data", {}):
            say(f"DaemonSet: --config {config_path} is not a key of a ConfigMap it mounts")
        else:
            with tempfile.NamedTemporaryFile("w", suffix=".json") as f:
                f.write(cm["data"][key])
                f.flush()
                p = subprocess.run([os.path.join(build, "bin", "tandemd"), "--config", f.name, "--help"],
                                   capture_output=True, text=True, timeout=10)
            if p.returncode != 0:
                say(f"ConfigMap {cm['metadata']['name']}: tandemd refuses {key}: {p.stderr.splitlines()[0]}")
            else:
                config = json.loads(cm["data"][key])
                if socket and config.get("socket", socket) != socket:
                    say(f"ConfigMap: tandemd's socket {config.get('socket')} is not the probes' {socket}")

    # The Service selects the DaemonSet's pods and names its port; the ServiceMonitor the Service.
    services = [d for _, d in objects(manifests, "Service")]
    for svc in services:
        selector = svc["spec"].get("selector", {})
        if not selector or any(ds_labels.get(k) != v for k, v in selector.items()):
            say(f"Service {svc['metadata']['name']}: selector {selector} does not select tandemd's pods")
        for p in svc["spec"].get("ports", []):
            if p.get("targetPort") not in ports and p.get("targetPort") not in ports.values():
                say(f"Service {svc['metadata']['name']}: targetPort {p.get('targetPort')!r} is not tandemd's")
    for path, sm in objects(manifests, "ServiceMonitor"):
        wanted = sm["spec"].get("selector", {}).get("matchLabels", {})
        namespaces = sm["spec"].get("namespaceSelector", {}).get("matchNames")
        chosen = [s for s in services if all(s["metadata"].get("labels", {}).get(k) == v for k, v in wanted.items())
                  and (namespaces is None or s["metadata"].get("namespace") in namespaces)]
        if not chosen:
            say(f"{path}: the ServiceMonitor selects no Service")
        names = {p.get("name") for s in chosen for p in s["spec"].get("ports", [])}
        for e in sm["spec"].get("endpoints", []):
            if e.get("port") not in names:
                say(f"{path}: endpoint port {e.get('port')!r} is not a port of the Services it selects")

    # The kustomization lists exactly the files beside it, all in its namespace.
    kustomizations = [d for p, d in objects(manifests, "Kustomization") if os.path.dirname(p) == ""]
    if len(kustomizations) != 1:
        say("deploy/kubernetes needs one kustomization.yaml")
    else:
        k = kustomizations[0]
        listed = set(k.get("resources", []))
        beside = {p for p in manifests if os.path.dirname(p) == "" and p != "kustomization.yaml"}
        for missing in sorted(listed - beside):
            say(f"kustomization.yaml lists {missing}, which does not exist")
        for unlisted in sorted(beside - listed):
            say(f"kustomization.yaml does not list {unlisted}")
        for p in sorted(listed & beside):
            for d in manifests[p]:
                ns = d["metadata"]["name"] if d.get("kind") == "Namespace" else d["metadata"].get("namespace")
                if ns != k.get("namespace"):
                    say(f"{p}: {name_of(d)} is in namespace {ns!r}, not the kustomization's {k.get('namespace')!r}")

    # The example pods: tandem's variables, the node's library and socket, the socket's group.
    settings = json.loads(subprocess.run([os.path.join(build, "bin", "tandemctl"), "settings", "--json"],
                                         capture_output=True, text=True, timeout=10, check=True).stdout)
    known = {s["name"]: s for s in settings["settings"]}
    roles = set(known["TANDEM_ROLE"]["accepted"].split("|"))
    pods = list(objects(manifests, "Pod"))
    if not any(any(e.get("name") == "TANDEM_ROLE" and e.get("value") == r for c in containers(pod_spec(d))
                   for e in c.get("env", [])) for _, d in pods for r in ("training",)) \
            or not any(e.get("value") == "inference" for _, d in pods for c in containers(pod_spec(d))
                       for e in c.get("env", []) if e.get("name") == "TANDEM_ROLE"):
        say("examples: need a training pod and an inference pod")
    for path, d in pods:
        spec = pod_spec(d)
        for term in spec.get("affinity", {}).get("podAffinity", {}).get(
                "requiredDuringSchedulingIgnoredDuringExecution", []):
            wanted = term.get("labelSelector", {}).get("matchLabels", {})
            if not any(all(o["metadata"].get("labels", {}).get(k) == v for k, v in wanted.items())
                       for _, o in pods if o is not d):
                say(f"{path}: its pod affinity {wanted} matches none of the example pods")
        for c in containers(spec):
            env = {e.get("name"): e.get("value") for e in c.get("env", [])}
            for name in env:
                if name.startswith("TANDEM_") and name not in known:
                    say(f"{path}: {name} is not a tandem setting")
            if env.get("TANDEM_ROLE") not in roles:
                say(f"{path}: TANDEM_ROLE {env.get('TANDEM_ROLE')!r} is not one of {sorted(roles)}")
            preload = env.get("LD_PRELOAD", "")
            library = mount_of(spec, c, preload) or {}
            if os.path.basename(preload) != "libtandem.so" or \
                    library.get("hostPath", {}).get("path") != host_paths.get("library"):
                say(f"{path}: LD_PRELOAD {preload!r} is not libtandem.so from the DaemonSet's library hostPath")
            sock = env.get("TANDEM_SOCKET", "/run/tandem/tandemd.sock")
            mounted = (mount_of(spec, c, sock) or {}).get("hostPath", {}).get("path")
            if socket and (mounted != host_paths.get((mount_of(ds_spec, daemon, socket) or {}).get("name"))
                           or os.path.basename(sock) != os.path.basename(socket)):
                say(f"{path}: TANDEM_SOCKET {sock} is not tandemd's socket from the node")
            group = config.get("socket_group")
            if group and env.get("TANDEM_ROLE") in ("training", "inference") and \
                    int(group) not in spec.get("securityContext", {}).get("supplementalGroups", []):
                say(f"{path}: role {env.get('TANDEM_ROLE')} needs the socket's group {group} in supplementalGroups")
    return problems


def problems_of(manifests, build):
    return schema_problems(manifests) + reference_problems(manifests, build)


def check(cond, message):
    print(("ok   " if cond else "FAIL ") + message)
    if not cond:
        raise SystemExit(1)


def case_valid(build):
    manifests = load_manifests(MANIFESTS)
    check(len(list(objects(manifests))) >= 8, f"read {len(list(objects(manifests)))} objects from deploy/kubernetes")
    problems = problems_of(manifests, build)
    for p in problems:
        print("  " + p)
    check(not problems, "no problems: API schema (strict), ServiceMonitor fields, references, settings")
    # Where kubectl is installed (the project does not need it): what the kustomization builds.
    kubectl = shutil.which("kubectl")
    if not kubectl:
        print("note: no kubectl on PATH; the kustomization was checked by its fields and file list only")
        return
    import yaml
    p = subprocess.run([kubectl, "kustomize", MANIFESTS], capture_output=True, text=True, timeout=60)
    check(p.returncode == 0, f"kubectl kustomize builds deploy/kubernetes: {p.stderr.strip()[:300]}")
    built = {"built.yaml": [d for d in yaml.safe_load_all(p.stdout) if d]}
    listed = {name_of(d) for path, d in objects(manifests) if not path.startswith("examples")
              and d.get("kind") != "Kustomization"}
    check({name_of(d) for _, d in objects(built)} == listed, f"into the objects of its files: {sorted(listed)}")
    problems = schema_problems(built)
    check(not problems, f"which pass the API schema too: {problems[:2]}")


def first(manifests, kind, path=None):
    return next(d for p, d in objects(manifests, kind) if path is None or p == path)


def ds_container(m):
    return first(m, "DaemonSet")["spec"]["template"]["spec"]["containers"][0]


def training_env(m):
    return first(m, "Pod", os.path.join("examples", "training-pod.yaml"))["spec"]["containers"][0]["env"]


BREAKAGES = [
    ("a misspelt field", lambda m: ds_container(m).update(livenessProb=ds_container(m).pop("livenessProbe")),
     "livenessProb"),
    ("a port as a string", lambda m: ds_container(m)["ports"][0].update(containerPort="9433"), "containerPort"),
    ("a container without its name", lambda m: ds_container(m).pop("name"), "name"),
    ("a ServiceMonitor interval that is no duration",
     lambda m: first(m, "ServiceMonitor")["spec"]["endpoints"][0].update(interval="15 seconds"), "interval"),
    ("a ServiceMonitor port that names nothing",
     lambda m: first(m, "ServiceMonitor")["spec"]["endpoints"][0].update(port="metric"), "endpoint port"),
    ("a mount of an undeclared volume", lambda m: ds_container(m)["volumeMounts"][0].update(name="socket-dirr"),
     "does not declare"),
    ("a misspelt tandem setting", lambda m: training_env(m).append({"name": "TANDEM_SLO_MSS", "value": "5"}),
     "TANDEM_SLO_MSS"),
    ("an unknown role", lambda m: next(e for e in training_env(m) if e["name"] == "TANDEM_ROLE").update(
        value="trainer"), "TANDEM_ROLE"),
    ("a Service selecting other pods", lambda m: first(m, "Service")["spec"].update(selector={"app": "other"}),
     "does not select"),
    ("a privileged daemon", lambda m: ds_container(m)["securityContext"].update(privileged=True), "privileged"),
    ("no hostPID", lambda m: first(m, "DaemonSet")["spec"]["template"]["spec"].update(hostPID=False), "hostPID"),
    ("a daemon without limits", lambda m: ds_container(m)["resources"].pop("limits"), "limits"),
    ("a configuration tandemd refuses",
     lambda m: first(m, "ConfigMap")["data"].update({"tandemd.json": '{"policy": 3}'}), "tandemd refuses"),
    ("a misspelt kustomization field", lambda m: first(m, "Kustomization").update(
        resource=first(m, "Kustomization").pop("resources")), "resource"),
    ("a kustomization listing a missing file",
     lambda m: first(m, "Kustomization")["resources"].append("rbac.yaml"), "rbac.yaml"),
    ("an affinity to no pod", lambda m: first(m, "Pod", os.path.join("examples", "inference-pod.yaml"))["spec"][
        "affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]["labelSelector"].update(
        matchLabels={"app.kubernetes.io/name": "tandem-training"}), "pod affinity"),
    ("a preload from elsewhere", lambda m: next(e for e in training_env(m) if e["name"] == "LD_PRELOAD").update(
        value="/usr/lib/libtandem.so"), "LD_PRELOAD"),
]


def case_broken(build):
    pristine = load_manifests(MANIFESTS)
    for what, breakage, expected in BREAKAGES:
        broken = copy.deepcopy(pristine)
        breakage(broken)
        problems = problems_of(broken, build)
        check(any(expected in p for p in problems), f"{what}: reported ({problems[:1]})")
    # The whole check, on a copy of the directory with a misspelt field written to a file.
    with tempfile.TemporaryDirectory(prefix="tandem-k8s-") as tmp:
        copy_dir = os.path.join(tmp, "kubernetes")
        shutil.copytree(MANIFESTS, copy_dir)
        path = os.path.join(copy_dir, "daemonset.yaml")
        text = open(path).read()
        open(path, "w").write(re.sub(r"\bhostPID:", "hostPid:", text, count=1))
        p = subprocess.run([sys.executable, __file__, build, "check", copy_dir], capture_output=True, text=True,
                           timeout=120)
        check(p.returncode == 1 and "hostPid" in p.stdout, f"`check DIR` on a broken copy exits 1 naming it: "
                                                         f"{p.returncode} {p.stdout.strip().splitlines()[:2]}")


def main():
    build, case = sys.argv[1], sys.argv[2]
    load_validator(build)
    if case == "check":
        problems = problems_of(load_manifests(sys.argv[3]), build)
        for p in problems:
            print(p)
        sys.exit(1 if problems else 0)
    {"valid": case_valid, "broken": case_broken}[case](build)


if __name__ == "__main__":
    main()
