#!/usr/bin/env python3
"""The Kubernetes manifests of deploy/kubernetes, checked without a cluster (docs/deploy.md):

  * every object against the Kubernetes API schema of the oldest and newest version we
    support (kubernetes-validate, strict: an unknown field is an error), the ServiceMonitor
    against a schema of the Prometheus Operator's fields that we use (the validator has no
    schemas of custom resources);
  * what a schema cannot see: names that refer to each other (volumes, ports, selectors, the
    ConfigMap, priority classes), the kustomization's list against the files, tandemd's
    configuration (parsed by tandemd itself), the example pods' TANDEM_* variables against the
    settings table (`tandemctl settings --json`), the library and socket they mount against the
    DaemonSet's, and the DaemonSet's privileges (hostPID, not privileged, limits, probes,
    metrics port);
  * the device plugin beside tandemd (its sockets, the kubelet's directories, the library it
    hands out), the pods that ask for its slots (one resource, what Allocate sets left to it,
    the socket's group), and the descheduler policy (a Prometheus query of a metric tandemd
    exports, evicting only the example filler) (docs/kubernetes.md).

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


SLOT_RESOURCES = ("tandem.io/bubble", "tandem.io/slo")
# What Allocate sets in a container given a slot (src/k8s/allocate.cpp): a pod does not.
ALLOCATED = ("TANDEM_ROLE", "LD_PRELOAD", "TANDEM_SOCKET", "TANDEM_MEM_LIMIT", "NVIDIA_VISIBLE_DEVICES")


def slot_resources(container):
    limits = container.get("resources", {}).get("limits", {})
    return [r for r in SLOT_RESOURCES if r in limits]


def option(command, flag):
    return command[command.index(flag) + 1] if flag in command and command.index(flag) + 1 < len(command) else None


def device_plugin_problems(ds_spec, host_paths, socket, daemon_command=()):
    problems = []
    say = problems.append
    plugin = next((c for c in ds_spec.get("containers", []) if c.get("name") == "device-plugin"), None)
    if plugin is None:
        return ["DaemonSet: no container named device-plugin (tandem-device-plugin, docs/kubernetes.md)"]
    command = plugin.get("command", []) + plugin.get("args", [])
    if not command or command[0] != "tandem-device-plugin":
        say("DaemonSet: the device-plugin container must run tandem-device-plugin")
    def host_dir(path):
        return host_paths.get((mount_of(ds_spec, plugin, path + "/x") or {}).get("name"))
    kubelet_dir = option(command, "--kubelet-dir") or "/var/lib/kubelet/device-plugins"
    if host_dir(kubelet_dir) != "/var/lib/kubelet/device-plugins":
        say(f"DaemonSet: the device plugin's --kubelet-dir {kubelet_dir} is not the kubelet's "
            f"/var/lib/kubelet/device-plugins from the node")
    pod_resources = os.path.dirname(kubelet_dir) + "/pod-resources"
    if host_dir(pod_resources) != "/var/lib/kubelet/pod-resources":
        say(f"DaemonSet: the device plugin needs the kubelet's pod-resources directory at {pod_resources}")
    plugin_socket = option(command, "--socket")
    if socket and (plugin_socket != socket or host_dir(os.path.dirname(socket)) is None):
        say(f"DaemonSet: the device plugin's --socket {plugin_socket} is not tandemd's {socket} from the node")
    # Grants are asked for on tandemd's admin socket, in a volume only the two containers share
    # (an emptyDir): no pod can reach it (docs/security.md).
    admin = option(command, "--admin-socket")
    daemon = next((c for c in ds_spec.get("containers", []) if c.get("name") == "tandemd"), {})
    if not admin or admin != option(list(daemon_command), "--admin-socket"):
        say(f"DaemonSet: the device plugin's --admin-socket {admin} is not tandemd's --admin-socket "
            f"{option(list(daemon_command), '--admin-socket')}")
    elif "emptyDir" not in (mount_of(ds_spec, plugin, admin) or {}) or "emptyDir" not in (mount_of(ds_spec, daemon, admin) or {}):
        say(f"DaemonSet: the admin socket {admin} must be in an emptyDir mounted by tandemd and the device plugin only")
    library = option(command, "--library-dir") or "/var/lib/tandem/lib"
    if library != host_paths.get("library"):
        say(f"DaemonSet: the device plugin's --library-dir {library} is not the library hostPath "
            f"{host_paths.get('library')} the init container fills")
    return problems


def descheduler_problems(manifests, metrics, fillers):
    """The descheduler's policy: a query of a metric tandemd exports, evicting fillers only."""
    import yaml
    problems = []
    say = problems.append
    maps = [(p, d) for p, d in objects(manifests, "ConfigMap") if p.startswith("descheduler")]
    if len(maps) != 1 or "policy.yaml" not in maps[0][1].get("data", {}):
        return ["descheduler/: expected one ConfigMap with a policy.yaml"]
    path, cm = maps[0]
    policy = yaml.safe_load(cm["data"]["policy.yaml"])
    if policy.get("apiVersion") != "descheduler/v1alpha2" or policy.get("kind") != "DeschedulerPolicy":
        say(f"{path}: policy.yaml is not a descheduler/v1alpha2 DeschedulerPolicy")
    if not any(m.get("source") == "Prometheus" and (m.get("prometheus") or {}).get("url")
               for m in policy.get("metricsProviders") or []):
        say(f"{path}: no Prometheus metrics provider with a url")
    plugins = {c.get("name"): c.get("args") or {} for prof in policy.get("profiles") or []
               for c in prof.get("pluginConfig") or []}
    enabled = {n for prof in policy.get("profiles") or []
               for n in ((prof.get("plugins") or {}).get("balance") or {}).get("enabled") or []}
    lnu = plugins.get("LowNodeUtilization")
    if lnu is None or "LowNodeUtilization" not in enabled:
        return problems + [f"{path}: LowNodeUtilization is not configured and enabled"]
    for key in ("thresholds", "targetThresholds"):
        if set((lnu.get(key) or {})) != {"MetricResource"}:
            say(f"{path}: LowNodeUtilization {key} must name only MetricResource (a Prometheus query's value)")
    low, high = (lnu.get("thresholds") or {}).get("MetricResource"), (lnu.get("targetThresholds") or {}).get("MetricResource")
    if not (isinstance(low, int) and isinstance(high, int) and 0 <= low <= high <= 100):
        say(f"{path}: thresholds {low} and {high} must be percentages, the first not above the second")
    query = ((lnu.get("metricsUtilization") or {}).get("prometheus") or {}).get("query", "")
    if (lnu.get("metricsUtilization") or {}).get("source") != "Prometheus":
        say(f"{path}: metricsUtilization must read Prometheus")
    named = set(re.findall(r"\btandem_[a-z_]+\b", query))
    if not named or not named <= metrics or "instance" not in query:
        say(f"{path}: the query {query!r} must read metrics tandemd exports (docs/metrics.md), per `instance`")
    selector = ((plugins.get("DefaultEvictor") or {}).get("labelSelector") or {}).get("matchLabels") or {}
    chosen = [name_of(d) for _, d in fillers
              if selector and all(d["metadata"].get("labels", {}).get(k) == v for k, v in selector.items())]
    others = [name_of(d) for _, d in objects(manifests, "Pod") if selector and name_of(d) not in
              {name_of(f) for _, f in fillers} and all(d["metadata"].get("labels", {}).get(k) == v
                                                        for k, v in selector.items())]
    if not chosen or others:
        say(f"{path}: the evictor's labelSelector {selector} must select the fillers and nothing else "
            f"(selects {chosen + others})")
    return problems


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

    problems += device_plugin_problems(ds_spec, host_paths, socket, command)

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

    # The example pods: tandem's variables, the node's library and socket, the socket's group;
    # a pod given a slot gets the role, preload, its grant's socket and library from the device
    # plugin, and no group of tandem's.
    settings = json.loads(subprocess.run([os.path.join(build, "bin", "tandemctl"), "settings", "--json"],
                                         capture_output=True, text=True, timeout=10, check=True).stdout)
    known = {s["name"]: s for s in settings["settings"]}
    roles = set(known["TANDEM_ROLE"]["accepted"].split("|"))
    pods = list(objects(manifests, "Pod"))

    def role_of(c):
        slots = slot_resources(c)
        if slots:
            return "batch-inference" if slots == ["tandem.io/bubble"] else "inference"
        return {e.get("name"): e.get("value") for e in c.get("env", [])}.get("TANDEM_ROLE")
    pod_roles = {role_of(c) for _, d in pods for c in containers(pod_spec(d))}
    if not {"training", "inference", "batch-inference"} <= pod_roles:
        say(f"examples: need a training pod, an inference pod and a filler pod (roles {sorted(filter(None, pod_roles))})")
    fillers = [(p, d) for p, d in pods if any(slot_resources(c) == ["tandem.io/bubble"] for c in containers(pod_spec(d)))]
    classes = {d["metadata"]["name"] for _, d in objects(manifests, "PriorityClass")}
    for path, d in pods:
        wanted = pod_spec(d).get("priorityClassName")
        if wanted and wanted not in classes | {"system-node-critical", "system-cluster-critical"}:
            say(f"{path}: priorityClassName {wanted} is no PriorityClass of the manifests")
    for path, d in pods:
        spec = pod_spec(d)
        for c in containers(spec):
            slots = slot_resources(c)
            if len(slots) > 1:
                say(f"{path}: container {c.get('name')} asks for {slots}: one of them (each sets TANDEM_ROLE)")
            if not slots:
                continue
            env = {e.get("name") for e in c.get("env", [])}
            for name in ALLOCATED:
                if name in env:
                    say(f"{path}: {name} is set by the device plugin's Allocate for a pod given a slot; leave it out")
            group = config.get("socket_group")
            if group and int(group) in spec.get("securityContext", {}).get("supplementalGroups", []):
                say(f"{path}: a pod given a slot reaches tandemd through its grant: it needs no socket group "
                    f"{group} in supplementalGroups (and should not have the group trusted with training)")
    problems += descheduler_problems(manifests, exported_metrics(), fillers)
    for path, d in pods:
        if any(slot_resources(c) for c in containers(pod_spec(d))):
            continue
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


def exported_metrics():
    """The metric families tandemd exports, as docs/metrics.md lists them (e2e_metrics_names
    checks that list against a running tandemd)."""
    with open(os.path.join(REPO, "docs", "metrics.md")) as f:
        return set(re.findall(r"^\| `(tandem_[a-z_]+)`", f.read(), re.M))


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
    listed = {name_of(d) for path, d in objects(manifests) if os.path.dirname(path) == ""
              and d.get("kind") != "Kustomization"}
    check({name_of(d) for _, d in objects(built)} == listed, f"into the objects of its files: {sorted(listed)}")
    problems = schema_problems(built)
    check(not problems, f"which pass the API schema too: {problems[:2]}")


def first(manifests, kind, path=None):
    return next(d for p, d in objects(manifests, kind) if path is None or p == path)


def ds_container(m):
    return first(m, "DaemonSet")["spec"]["template"]["spec"]["containers"][0]


def plugin_container(m):
    return first(m, "DaemonSet")["spec"]["template"]["spec"]["containers"][1]


def plugin_command(m):
    return plugin_container(m)["command"]


def slot_env(m, name):
    return first(m, "Pod", os.path.join("examples", name))["spec"]["containers"][0].setdefault("env", [])


def descheduler_policy(m, change):
    import yaml
    cm = first(m, "ConfigMap", os.path.join("descheduler", "policy.yaml"))
    policy = yaml.safe_load(cm["data"]["policy.yaml"])
    change(policy)
    cm["data"]["policy.yaml"] = yaml.safe_dump(policy)


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
    ("a device plugin handing out another library directory",
     lambda m: plugin_command(m).__setitem__(plugin_command(m).index("--library-dir") + 1, "/opt/lib"), "--library-dir"),
    ("a device plugin without the kubelet's directory",
     lambda m: plugin_container(m)["volumeMounts"].pop(1), "--kubelet-dir"),
    ("a slot pod setting its own role", lambda m: slot_env(m, "filler-pod.yaml").append(
        {"name": "TANDEM_ROLE", "value": "batch-inference"}), "set by the device plugin"),
    ("a slot pod with the socket's group", lambda m: first(m, "Pod", os.path.join("examples", "filler-pod.yaml"))[
        "spec"]["securityContext"].update(supplementalGroups=[2000]), "supplementalGroups"),
    ("a device plugin asking for grants on another socket",
     lambda m: plugin_command(m).__setitem__(plugin_command(m).index("--admin-socket") + 1, "/run/other/x.sock"),
     "--admin-socket"),
    ("a pod asking for both slots", lambda m: first(m, "Pod", os.path.join("examples", "inference-pod.yaml"))["spec"][
        "containers"][0]["resources"]["limits"].update({"tandem.io/bubble": 1}), "one of them"),
    ("a priority class that does not exist", lambda m: first(m, "Pod", os.path.join("examples", "filler-pod.yaml"))[
        "spec"].update(priorityClassName="tandem-fill"), "priorityClassName"),
    ("a descheduler query of a metric tandemd does not export", lambda m: descheduler_policy(m, lambda p: p[
        "profiles"][0]["pluginConfig"][1]["args"]["metricsUtilization"]["prometheus"].update(
        query="max by (instance) (tandem_node_presure_ratio)")), "must read metrics tandemd exports"),
    ("a descheduler evicting every pod", lambda m: descheduler_policy(m, lambda p: p["profiles"][0]["pluginConfig"][0][
        "args"].pop("labelSelector")), "labelSelector"),
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
