#!/usr/bin/env python3
"""The demo's table: the four configurations side by side, from the examples' JSON output.

Bubble utilization = GPU time the filler ran per second / time per second the training job
left the GPU idle, where idle = 1 - (training iterations/s x compute time per iteration).
"""
import json
import os
import sys


def last_json(path):
    lines = [l for l in open(path).read().splitlines() if l.startswith("{")]
    return json.loads(lines[-1])


def utilization(train, infer):
    compute_s = train["compute_us"] / 1e6
    idle = 1.0 - train["iters_per_s"] * compute_s
    filler_busy = infer["throughput_rps"] * infer["gpu_ms_per_request"] / 1e3
    return filler_busy / idle if idle > 0 else 0.0


def plot(out, rows):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("demo: matplotlib not installed (apt-get install python3-matplotlib): no PNG")
        return None
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4))
    names = [r[0] for r in rows]
    ax1.bar([n + "\ntrain" for n in names], [r[1] or 0 for r in rows], color="tab:blue")
    ax1.bar([n + "\ninfer" for n in names], [r[2] or 0 for r in rows], color="tab:orange")
    ax1.set_ylabel("throughput / Exclusive")
    ax1.set_title("normalized throughput")
    ax1.tick_params(axis="x", labelsize=7)
    trace_path = os.path.join(out, "trace.json")
    if os.path.exists(trace_path):
        events = json.load(open(trace_path))["traceEvents"]
        t0 = min((e["ts"] for e in events), default=0)
        for e in events:
            if e["name"] == "bubble":
                ax2.axvspan((e["ts"] - t0) / 1e3, (e["ts"] + e["dur"] - t0) / 1e3, color="tab:green", alpha=0.3)
        grants = [((e["ts"] - t0) / 1e3, e["args"]["ns"] / 1e3) for e in events if e["name"] == "tokens granted"]
        if grants:
            ax2.scatter([g[0] for g in grants], [g[1] for g in grants], s=6, color="tab:orange", label="tokens granted (us)")
            ax2.legend(loc="upper right")
        ax2.set_xlabel("ms")
        ax2.set_title("training bubbles (green) and grants to the filler")
    png = os.path.join(out, "timeline.png")
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    return png


def main(out):
    ex_t = last_json(f"{out}/exclusive-train.json")
    ex_i = last_json(f"{out}/exclusive-infer.json")
    rows = []
    for name, prefix in (("Exclusive", "exclusive"), ("Co-Exec", "coexec"), ("tandem", "tandem")):
        t = last_json(f"{out}/{prefix}-train.json") if prefix != "exclusive" else ex_t
        i = last_json(f"{out}/{prefix}-infer.json") if prefix != "exclusive" else ex_i
        if prefix == "exclusive":
            rows.append(("Exclusive", 1.0, 1.0, i["p95_ms"], None))
        else:
            rows.append((name, t["iters_per_s"] / ex_t["iters_per_s"], i["throughput_rps"] / ex_i["throughput_rps"],
                         i["p95_ms"], utilization(t, i)))
    print()
    print(f"{'configuration':<14}{'training':>10}{'inference':>11}{'infer p95 ms':>14}{'bubble use':>12}")
    for name, tr, inf, p95, util in rows:
        u = "-" if util is None else f"{util:.2f}"
        print(f"{name:<14}{tr:>10.3f}{inf:>11.3f}{p95:>14.2f}{u:>12}")
    print(f"(training and inference are throughputs divided by Exclusive: {ex_t['iters_per_s']:.2f} it/s, "
          f"{ex_i['throughput_rps']:.1f} req/s; bubble use: filler GPU time / training idle time)")
    png = plot(out, rows)
    print(f"demo: files in {out}" + (f"; timeline {png}" if png else "") +
          ("; trace.json opens in ui.perfetto.dev" if os.path.exists(f"{out}/trace.json") else ""))
    with open(f"{out}/summary.json", "w") as f:
        json.dump([dict(zip(("configuration", "training", "inference", "p95_ms", "bubble_use"), r)) for r in rows], f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
