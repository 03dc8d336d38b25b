#!/usr/bin/env python3
"""Fill-policy benchmark on the simulated GPU (or the real one with --real): training
throughput retained and bubble utilization with 1, 2 and 4 batch-inference fillers, and the
time from a bubble's detection to the first token grant. Prints JSON lines.
--workload pytorch: the same with examples/pytorch/train.py and serve.py (from the project's
venv, or TANDEM_TEST_PYTHON) instead of train-sim and infer-sim, per configuration (Exclusive,
Co-Exec time slicing, Co-Exec MPS, tandem; with --real the GPU as it is set up, no MPS row):
scripts/bench_fill_pytorch.py.
--workload pipeline: pipeline-parallel training (examples/pytorch/pipeline.py, --stages N, 2
unless given, --schedule gpipe|1f1b, GPipe unless given) with a PyTorch batch filler on each
stage's GPU: Exclusive, Co-Exec, tandem (scripts/bench_fill_pipeline.py), --rounds R (2); only
2 stages have been measured.
usage: scripts/bench_fill.py [BUILD_DIR] [--seconds S] [--real] [--workload sim|pytorch|pipeline]
                             [--stages N] [--schedule gpipe|1f1b] [--rounds R]"""
import json
import os
import subprocess
import sys
import tempfile
import time


def last_json(text):
    return json.loads([l for l in text.splitlines() if l.startswith("{")][-1])


def main():
    args = sys.argv[1:]
    build = args[0] if args and not args[0].startswith("--") else "build"
    workload = args[args.index("--workload") + 1] if "--workload" in args else "sim"
    if workload not in ("sim", "pytorch", "pipeline"):
        sys.exit(f"bench_fill: unknown workload '{workload}' (sim, pytorch or pipeline)")
    if workload == "pipeline":
        if "--real" in args:
            sys.exit("bench_fill: --workload pipeline runs on the simulated GPUs only")
        import bench_fill_pipeline
        option = lambda name, default: args[args.index(name) + 1] if name in args else default
        schedule = option("--schedule", "gpipe")
        if schedule not in ("gpipe", "1f1b"):
            sys.exit(f"bench_fill: unknown schedule '{schedule}' (gpipe or 1f1b)")
        return bench_fill_pipeline.main(os.path.abspath(build), float(option("--seconds", "6")), schedule=schedule,
                                        stages=int(option("--stages", "2")), rounds=int(option("--rounds", "2")))
    if workload == "pytorch":
        import bench_fill_pytorch
        return bench_fill_pytorch.main(os.path.abspath(build), float(args[args.index("--seconds") + 1])
                                       if "--seconds" in args else 6.0, real="--real" in args)
    seconds = args[args.index("--seconds") + 1] if "--seconds" in args else "4"
    env = dict(os.environ)
    if "--real" not in args:
        env["LD_LIBRARY_PATH"] = os.path.join(build, "simgpu")
        env["SIMGPU_SHM"] = f"/simgpu-bench-{os.getpid()}"
    tmp = tempfile.mkdtemp(prefix="tandem-bench-")
    sock = os.path.join(tmp, "tandemd.sock")
    env["TANDEM_SOCKET"] = sock
    exe = lambda name: os.path.join(build, "bin", name)
    managed = lambda role: dict(env, LD_PRELOAD=os.path.join(build, "lib", "libtandem.so"), TANDEM_ROLE=role)

    alone = last_json(subprocess.run([exe("train-sim"), "--seconds", seconds], env=env, capture_output=True, text=True).stdout)
    for fillers in (1, 2, 4):
        d = subprocess.Popen([exe("tandemd"), "--foreground", "--socket", sock, "--log", "warn"], env=env)
        while not os.path.exists(sock):
            time.sleep(0.05)
        t = subprocess.Popen([exe("train-sim"), "--seconds", seconds], env=managed("training"), stdout=subprocess.PIPE, text=True)
        fs = [subprocess.Popen([exe("infer-sim"), "--seconds", seconds, "--seed", str(i)], env=managed("batch-inference"),
                               stdout=subprocess.PIPE, text=True) for i in range(fillers)]
        time.sleep(1)
        trace_path = os.path.join(tmp, f"trace-{fillers}.json")
        subprocess.run([exe("tandemctl"), "trace", "--seconds", "1", "--out", trace_path, "--socket", sock], env=env,
                       capture_output=True)
        train = last_json(t.communicate()[0])
        infers = [last_json(f.communicate()[0]) for f in fs]
        d.terminate()
        d.wait()
        idle = 1.0 - train["iters_per_s"] * train["compute_us"] / 1e6
        filler_busy = sum(i["throughput_rps"] * i["gpu_ms_per_request"] / 1e3 for i in infers)
        events = json.load(open(trace_path))["traceEvents"] if os.path.exists(trace_path) else []
        bubbles = sorted(e["ts"] for e in events if e["name"] == "bubble")
        grants = sorted(e["ts"] for e in events if e["name"] == "tokens granted")
        latencies = []
        for b in bubbles:
            after = [g for g in grants if g >= b]
            if after:
                latencies.append(after[0] - b)
        latencies.sort()
        print(json.dumps({
            "benchmark": "fill", "fillers": fillers, "seconds": float(seconds),
            "training_retained": round(train["iters_per_s"] / alone["iters_per_s"], 4),
            "bubble_utilization": round(filler_busy / idle, 4) if idle > 0 else None,
            "filler_rps": [round(i["throughput_rps"], 2) for i in infers],
            "grant_after_bubble_start_us": {"p50": latencies[len(latencies) // 2] if latencies else None,
                                            "max": latencies[-1] if latencies else None, "bubbles": len(latencies)}}))
        sys.stdout.flush()
        os.unlink(sock) if os.path.exists(sock) else None


if __name__ == "__main__":
    sys.exit(main())
