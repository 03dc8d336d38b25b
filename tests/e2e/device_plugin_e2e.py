#!/usr/bin/env python3
"""tandem-device-plugin against a fake kubelet (tests/k8s/fake_kubelet.cpp: the kubelet's own
gRPC APIs), a real tandemd and train-sim on two simulated GPUs (docs/kubernetes.md).

usage: device_plugin_e2e.py BUILD_DIR CASE
  registration  both resources register (v1beta1, their sockets, preferred allocation) and
                stream their lists; a kubelet restart (every socket removed, kubelet.sock
                recreated) and 10 restarts in a row: the plugin registers again each time,
                without growing its threads or descriptors
  bubbles       GPU 1's training has ~40% bubbles (36% of its time fillable), GPU 0's none: GPU 1 offers tandem.io/bubble
                slots, GPU 0 none, and the count holds still under the steady load; then GPU 1's
                training loses its bubbles: its count falls to 0 within 10 s, and tandemd's
                pressure (a filler left without room) rises to 1
  allocate      Allocate's answer (the GPU, the preload, role, memory limit, socket and library
                mounts); unknown devices refused by name while the plugin goes on serving;
                GetPreferredAllocation keeps a container on one GPU; a slot a pod holds (the
                pod-resources API) stays healthy when the count shrinks, free ones do not
  tandemd-gone  tandemd restarted within stale_after_s: the counts are kept; tandemd gone for
                longer: no free slot is offered
  bad-kubelet   a kubelet whose Register hangs (the plugin retries, and registers once it
                answers), one that stops reading its stream (the plugin goes on answering) and
                one that cancels it (the plugin registers again for a new stream)
  bad-slots     slots larger than the GPU (memory) or than the policy allows (time share): one
                clear error each, none offered, the plugin goes on serving; a share out of range
                in tandemd's configuration: tandemd refuses to start and says why
  slo           policy slo: tandem.io/slo slots while training keeps its share; an online
                target that cannot be held (no headroom): no free slo slot
"""
import json
import os
import subprocess
import time

from e2e_util import check, run_case, wait_for
from fake_kubelet import Kubelet, nvidia

# Short windows, so that a case takes seconds; hysteresis and margin as shipped.
QUICK = {"fast_window_s": 1, "grow_after_s": 1, "min_interval_s": 2, "stale_after_s": 3}
BUBBLY = ("--gap-us", "20000")  # 4 x 7 ms compute, 6 ms collective, 20 ms gap: 48% idle, 36% fillable
BUSY = ("--comm-us", "0", "--gap-us", "0")  # no bubble at all
BUBBLE, SLO = "tandem.io/bubble", "tandem.io/slo"


def tandemd(env, slots=None, policy="fill", expect_exit=False):
    config = os.path.join(env.tmp, "tandemd.json")
    with open(config, "w") as f:
        json.dump({"slots": slots if slots is not None else QUICK}, f)
    d = env.popen([os.path.join(env.build, "bin", "tandemd"), "--foreground", "--socket", env.socket, "--log", "warn",
                   "--policy", policy, "--config", config], env=env.base, stderr=subprocess.PIPE, text=True)
    if expect_exit:
        return d
    check(wait_for(lambda: os.path.exists(env.socket)), "tandemd is up")
    return d


def plugin(env, kubelet, *extra):
    log = open(os.path.join(env.tmp, "plugin.log"), "a")
    p = env.popen([os.path.join(env.build, "bin", "tandem-device-plugin"), "--socket", env.socket, "--kubelet-dir",
                   kubelet.dir, "--log", "info", *extra], env=env.base, stderr=log)
    return p


def plugin_log(env):
    with open(os.path.join(env.tmp, "plugin.log")) as f:
        return f.read()


def setup(env, slots=None, policy="fill"):
    env.base["SIMGPU_DEVICES"] = "2"
    d = tandemd(env, slots, policy)
    k = Kubelet(env)
    check(k.wait(lambda e: e["event"] == "serving" and e["ok"]) is not None, "the fake kubelet serves")
    p = plugin(env, k)
    for r in (BUBBLE, SLO):
        check(k.wait(lambda e, r=r: e["event"] == "register" and e["resource"] == r) is not None, f"{r} registered")
    return d, k, p


def train(env, gpu, shape, seconds="60"):
    return env.start("train-sim", "--seconds", seconds, *shape, role="training", CUDA_VISIBLE_DEVICES=str(gpu))


def gpu_uuids(env, n):
    """The UUIDs tandemd tracks, once it tracks n GPUs."""
    status = wait_for(lambda: (s := env.status()) and len(s["gpus"]) >= n and s, 10)
    check(bool(status), f"tandemd tracks {n} GPU(s)")
    return [g["uuid"] for g in status["gpus"]]


def start_bubbly(env, k):
    """Training with bubbles on GPU 1; its UUID once it offers bubble slots."""
    t = train(env, 1, BUBBLY)
    [uuid] = gpu_uuids(env, 1)
    e = k.wait(lambda e: e["event"] == "devices" and e["resource"] == BUBBLE and
               any(d["id"].startswith(nvidia(uuid)) and d["health"] == "Healthy" for d in e["devices"]), 15)
    check(e is not None, f"GPU {uuid[:8]} (training with bubbles) offers bubble slots")
    return t, uuid


def registration(env):
    _, k, p = setup(env)
    for r in (BUBBLE, SLO):
        reg = k.wait(lambda e, r=r: e["event"] == "register" and e["resource"] == r)
        check(reg["version"] == "v1beta1" and reg["endpoint"] == ("tandem-bubble.sock" if r == BUBBLE else "tandem-slo.sock")
              and reg["preferred_allocation"], f"{r}: version v1beta1, its own socket, preferred allocation offered")
        check(k.wait(lambda e, r=r: e["event"] == "options" and e["resource"] == r and e["ok"]) is not None,
              f"{r}: GetDevicePluginOptions answered")
        check(k.wait(lambda e, r=r: e["event"] == "devices" and e["resource"] == r) is not None, f"{r}: a device list")
    since = k.command("restart")
    for r in (BUBBLE, SLO):
        check(k.wait(lambda e, r=r: e["event"] == "register" and e["resource"] == r, 5, since) is not None,
              f"{r} registers again after a kubelet restart")
        check(k.wait(lambda e, r=r: e["event"] == "devices" and e["resource"] == r, 5, since) is not None,
              f"{r} streams its list to the new kubelet")
    time.sleep(1)
    fds, threads = len(os.listdir(f"/proc/{p.pid}/fd")), len(os.listdir(f"/proc/{p.pid}/task"))
    for _ in range(10):
        k.command("restart")
    since = k.mark()
    k.command("restart")
    for r in (BUBBLE, SLO):
        check(k.wait(lambda e, r=r: e["event"] == "devices" and e["resource"] == r, 8, since) is not None,
              f"{r} registered and streams after 11 restarts in a row")
    time.sleep(2)
    fds2, threads2 = len(os.listdir(f"/proc/{p.pid}/fd")), len(os.listdir(f"/proc/{p.pid}/task"))
    print(f"plugin: {fds} -> {fds2} descriptors, {threads} -> {threads2} threads")
    check(p.poll() is None and fds2 <= fds + 8 and threads2 <= threads + 8, "the plugin grew no descriptors or threads")


def bubbles(env):
    # The short window as shipped (2 s): the 10 s goal is the real one.
    _, k, _ = setup(env, dict(QUICK, fast_window_s=2, window_s=4, stale_after_s=10))
    filler = env.start("infer-sim", "--seconds", "60", "--closed-loop", role="batch-inference", CUDA_VISIBLE_DEVICES="1")
    t1, bubbly = start_bubbly(env, k)
    train(env, 0, BUSY)
    uuids = gpu_uuids(env, 2)
    [busy] = [u for u in uuids if u != bubbly]
    # Settled: two slots or more (on a loaded machine the share takes a few seconds to rise).
    wait_for(lambda: (k.healthy(BUBBLE, bubbly) or 0) >= 2, 15)
    time.sleep(1)
    since, settled = k.mark(), k.healthy(BUBBLE, bubbly)
    time.sleep(6)
    counts = [settled] + [sum(1 for d in e["devices"] if d["id"].startswith(nvidia(bubbly)) and
                                                d["health"] == "Healthy") for e in k.lists(BUBBLE, since)]
    print(f"GPU {bubbly[:8]} bubble slots over 6 s of steady training: {counts}")
    print("\n".join(l for l in plugin_log(env).splitlines() if " -> " in l))
    check(counts[0] >= 2, f"training with ~40% bubbles: {counts[0]} bubble slots (>= 2)")
    check(len(set(counts)) == 1, "the count holds still under a steady load")
    check(k.healthy(BUBBLE, busy) == 0, f"training without bubbles (GPU {busy[:8]}): 0 bubble slots")
    status = env.status()
    pressure = {g["uuid"]: g["capacity"]["pressure"] for g in status["gpus"]}
    check(pressure[bubbly] == 0 and status["daemon"]["pressure"] == 0, "no pressure while the filler has room")
    # Training ramps up: no more bubbles on GPU 1 (the filler keeps the GPU known).
    t1.kill()
    t1.wait()
    start = time.monotonic()
    train(env, 1, BUSY)
    gone = wait_for(lambda: k.healthy(BUBBLE, bubbly) == 0, 12)
    took = time.monotonic() - start
    print(f"bubbles gone: 0 slots after {took:.1f} s")
    check(gone and took <= 10, f"the lost capacity reached ListAndWatch within 10 s ({took:.1f} s)")
    p = wait_for(lambda: (s := env.status()) and s["daemon"]["pressure"] >= 0.9 and s["daemon"]["pressure"], 12)
    check(bool(p), f"the node's pressure rises once capacity stays gone ({p})")
    filler.kill()


def allocate(env):
    _, k, _ = setup(env)
    _, uuid = start_bubbly(env, k)
    b0, b1 = nvidia(uuid) + "-b0", nvidia(uuid) + "-b1"
    a = k.call(f"allocate {BUBBLE} {b0}")
    check(a and a["ok"], "Allocate of a healthy slot succeeds")
    envs, mounts = a["envs"], {m["container_path"]: m for m in a["mounts"]}
    print(json.dumps(a))
    check(envs["NVIDIA_VISIBLE_DEVICES"] == nvidia(uuid), "NVIDIA_VISIBLE_DEVICES names the slot's GPU")
    check(envs["TANDEM_ROLE"] == "batch-inference" and envs["TANDEM_MEM_LIMIT"] == str(4 << 30),
          "role batch-inference, a slot's memory (4 GiB)")
    check(envs["LD_PRELOAD"] == "/opt/tandem/lib/libtandem.so" and envs["TANDEM_SOCKET"] == "/run/tandem/tandemd.sock",
          "the preload and tandemd's socket, as the container sees them")
    grant_dir = mounts["/run/tandem"]["host_path"]
    check(os.path.dirname(grant_dir) == os.path.join(env.tmp, "grants") and mounts["/run/tandem"]["read_only"] and
          mounts["/opt/tandem/lib"]["host_path"] == "/var/lib/tandem/lib",
          f"the grant's directory (never tandemd's socket's) and the library mounted: {grant_dir}")
    grants = {g["name"]: g for g in env.status()["grants"]}
    g = grants.get(os.path.basename(grant_dir), {})
    check(g.get("role") == "batch-inference" and g.get("gpus") == [uuid] and g.get("memory_limit") == str(4 << 30) and
          os.path.exists(os.path.join(grant_dir, "tandemd.sock")),
          f"tandemd made the grant: the slot's role, GPU and memory, its socket there: {g}")
    a = k.call(f"allocate {BUBBLE} {b0} {b1}")
    check(a["ok"] and a["envs"]["TANDEM_MEM_LIMIT"] == str(8 << 30), "two slots: twice the memory")
    bad = [f"{nvidia(uuid)}-s0", f"{nvidia(uuid)}-b8", f"{nvidia('0' * 32)}-b0", "GPU-nonsense", ""]
    for dev in bad:
        a = k.call(f"allocate {BUBBLE} {dev}".strip())
        check(a and not a["ok"] and a["code"] == 3 and (dev or "no device") in a["error"],
              f"Allocate of '{dev}' refused, naming it: {a['error'][:90]}")
    check(k.call(f"allocate {BUBBLE} {b1}")["ok"], "the plugin goes on serving after bad requests")
    other = "GPU-11111111-2222-3333-4444-555555555555"
    pref = k.call(f"preferred {BUBBLE} 2 {other}-b0 {b0} {other}-b1 {b1} {nvidia(uuid)}-b2")
    check(pref["ok"] and len(pref["ids"]) == 2 and all(i.startswith(nvidia(uuid)) for i in pref["ids"]),
          f"preferred allocation: both slots on the GPU with most free ({pref['ids']})")
    # A pod holds b1; the training's bubbles vanish (it ends, the GPU is no longer tracked).
    k.command(f"hold {BUBBLE} {b1}")
    time.sleep(1.5)
    for p in env.started:
        if p.args[0].endswith("train-sim"):
            p.kill()
    ok = wait_for(lambda: (lists := k.lists(BUBBLE)) and {d["id"]: d["health"] for d in lists[-1]["devices"]
                                                          if d["id"].startswith(nvidia(uuid))}.get(b0) == "Unhealthy", 10)
    last = {d["id"]: d["health"] for d in k.lists(BUBBLE)[-1]["devices"]}
    check(ok and last[b1] == "Healthy" and last[b0] == "Unhealthy",
          "capacity gone: the slot a pod holds stays healthy, the free one does not")


def tandemd_gone(env):
    d, k, _ = setup(env, dict(QUICK, stale_after_s=8))
    _, uuid = start_bubbly(env, k)
    n = wait_for(lambda: k.healthy(BUBBLE, uuid), 5)
    d.kill()
    d.wait()
    since = k.mark()
    time.sleep(1)
    tandemd(env, dict(QUICK, stale_after_s=8))  # training registers again on its own
    time.sleep(4)
    counts = [sum(1 for x in e["devices"] if x["id"].startswith(nvidia(uuid)) and x["health"] == "Healthy")
              for e in k.lists(BUBBLE, since)]
    check(k.healthy(BUBBLE, uuid) == n and all(c >= 1 for c in counts),
          f"tandemd restarted within stale_after_s: slots kept ({n}, lists meanwhile {counts}, now {k.healthy(BUBBLE, uuid)})")
    for p in env.started:
        if p.args[0].endswith("tandemd") and p.poll() is None:
            p.kill()
    start = time.monotonic()
    gone = wait_for(lambda: k.healthy(BUBBLE, uuid) == 0, 15)
    print(f"tandemd gone: 0 slots after {time.monotonic() - start:.1f} s")
    check(gone, "tandemd gone for longer: no slot offered")
    check("no tandemd answers" in plugin_log(env), "the plugin says tandemd does not answer")


def bad_kubelet(env):
    _, k, p = setup(env)
    _, uuid = start_bubbly(env, k)
    # Register hangs: the plugin gives up after its deadline, retries, registers once answered.
    k.command("hang on")
    since = k.command("restart")
    time.sleep(4)
    check(p.poll() is None and "did not register" in plugin_log(env), "a hung Register: the plugin retries")
    k.command("hang off")
    check(k.wait(lambda e: e["event"] == "devices" and e["resource"] == BUBBLE, 40, since) is not None,
          "registered and streaming once the kubelet answers")
    # A kubelet that stops reading its stream: the plugin keeps answering.
    k.command(f"stall {BUBBLE} on")
    start = time.monotonic()
    a = k.call(f"allocate {BUBBLE} {nvidia(uuid)}-b0")
    check(a["ok"] and time.monotonic() - start < 3, "Allocate answered while the stream is not read")
    k.command(f"stall {BUBBLE} off")
    # A kubelet that cancels the stream: the plugin registers again for a new one.
    since = k.command(f"close {BUBBLE}")
    check(k.wait(lambda e: e["event"] == "stream_end" and e["resource"] == BUBBLE, 5, since) is not None, "stream cancelled")
    check(k.wait(lambda e: e["event"] == "register" and e["resource"] == BUBBLE, 10, since) is not None,
          "the plugin registers again after its stream was cancelled")
    check(k.wait(lambda e: e["event"] == "devices" and e["resource"] == BUBBLE, 5, since) is not None, "a new stream")


def bad_slots(env):
    d = tandemd(env, {"bubble": {"share": 1.5}}, expect_exit=True)
    err = d.communicate(timeout=10)[1]
    check(d.returncode == 2 and "slots" in err and "share" in err, f"tandemd refuses a share of 1.5: {err.splitlines()[0]}")
    os.unlink(env.socket) if os.path.exists(env.socket) else None
    _, k, p = setup(env, dict(QUICK, bubble={"memory": "100G"}, slo={"share": 0.5}), policy="slo")
    train(env, 1, BUBBLY)
    [uuid] = gpu_uuids(env, 1)
    time.sleep(5)
    log = plugin_log(env)
    print("\n".join(l for l in log.splitlines() if "error" in l))
    check("tandem.io/bubble slot's memory, 100G (100.0 GiB), is more than GPU" in log, "a clear error: bubble memory")
    check("tandem.io/slo slot's share, 0.5, is more than online inference may take" in log, "a clear error: slo share")
    check(log.count("slot's memory, 100G") == 1, "said once, not at every poll")
    check(k.healthy(BUBBLE, uuid) == 0 and k.healthy(SLO, uuid) == 0, "no slot offered")
    a = k.call(f"allocate {BUBBLE} {nvidia(uuid)}-b0")
    check(p.poll() is None and a["ok"], "the plugin goes on serving")


def slo(env):
    _, k, _ = setup(env, dict(QUICK, slo={"share": 0.1}), policy="slo")
    train(env, 1, BUBBLY)
    [uuid] = gpu_uuids(env, 1)
    check(wait_for(lambda: k.healthy(SLO, uuid) == 4, 10), "policy slo: 4 slo slots (max 4 of 0.1 each)")
    # An online server whose target cannot be held: no new slo slot.
    env.start("infer-sim", "--seconds", "30", "--closed-loop", role="inference", TANDEM_SLO_MS="1",
              CUDA_VISIBLE_DEVICES="1")
    check(wait_for(lambda: k.healthy(SLO, uuid) == 0, 10), "an online target without headroom: no free slo slot")


run_case({"registration": registration, "bubbles": bubbles, "allocate": allocate, "tandemd-gone": tandemd_gone,
          "bad-kubelet": bad_kubelet, "bad-slots": bad_slots, "slo": slo})
