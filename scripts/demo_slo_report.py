#!/usr/bin/env python3
"""The inference-first scenario's table and plot (scripts/demo_slo.sh), from the examples' JSON
output and tandemd's status (its control history).

usage: demo_slo_report.py OUT_DIR BURST   (BURST as AT:RATE:SECONDS, for the plot)
Latency percentiles are divided by Exclusive's; training and inference throughputs by theirs;
system throughput is their sum (2.0 would be two GPUs' worth). SLO attainment: the fraction of
requests within the target (Exclusive's p99 plus 10%, so Exclusive itself attains >= 0.99).
"""
import json
import os
import sys


def last_json(path):
    lines = [l for l in open(path).read().splitlines() if l.startswith("{")]
    return json.loads(lines[-1])


def plot(out, history, burst, target_ms):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("demo: matplotlib not installed (apt-get install python3-matplotlib): no PNG")
        return None
    if not history:
        return None
    t0 = history[0]["t_s"]
    t = [h["t_s"] - t0 for h in history]
    fig, ax = plt.subplots(figsize=(10, 4))
    ax.plot(t, [h["latency_ms"] or None for h in history], color="tab:orange", marker=".",
            label="inference p99 per control period (ms)")
    ax.axhline(target_ms, color="tab:red", linestyle="--", label=f"target {target_ms:g} ms")
    ax.set_xlabel("s (tandemd's clock)")
    ax.set_ylabel("ms")
    ax2 = ax.twinx()
    ax2.step(t, [h["duty"] for h in history], where="post", color="tab:blue", label="training duty cycle")
    ax2.set_ylim(0, 1.05)
    ax2.set_ylabel("duty cycle")
    at, _, seconds = (float(x) for x in burst.split(":"))
    # The burst's times are infer-sim's; the inference process starts about when tandemd's
    # first active period does.
    start = next((h["t_s"] - t0 for h in history if h["active"]), 0.0)
    ax.axvspan(start + at, start + at + seconds, color="grey", alpha=0.2, label="burst")
    lines = ax.get_legend_handles_labels()[0] + ax2.get_legend_handles_labels()[0]
    ax.legend(lines, [l.get_label() for l in lines], loc="upper right", fontsize=8)
    ax.set_title("tandem, policy slo: measured latency and training's duty cycle")
    png = os.path.join(out, "slo.png")
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    return png


def main(out, burst):
    ex_t, ex_i = last_json(f"{out}/exclusive-train.json"), last_json(f"{out}/exclusive-infer.json")
    rows = []
    for name, prefix in (("Exclusive", "exclusive"), ("Co-Exec", "coexec"), ("tandem", "tandem")):
        t, i = last_json(f"{out}/{prefix}-train.json"), last_json(f"{out}/{prefix}-infer.json")
        tr = 1.0 if prefix == "exclusive" else t["iters_per_s"] / ex_t["iters_per_s"]
        inf = 1.0 if prefix == "exclusive" else i["throughput_rps"] / ex_i["throughput_rps"]
        attain = None if prefix == "exclusive" else i["slo_attainment"]
        rows.append((name, i["p50_ms"], i["p95_ms"], i["p99_ms"], attain, tr, inf))
    target = last_json(f"{out}/tandem-infer.json")["slo_ms"]
    print()
    print(f"inference-first: latency target p99 <= {target:g} ms")
    print(f"{'configuration':<14}{'p50':>8}{'p95':>8}{'p99':>8}{'SLO att.':>10}{'training':>10}{'inference':>11}{'system':>8}")
    for name, p50, p95, p99, attain, tr, inf in rows:
        a = ">=0.99" if attain is None else f"{attain:.3f}"
        print(f"{name:<14}{p50 / rows[0][1]:>8.2f}{p95 / rows[0][2]:>8.2f}{p99 / rows[0][3]:>8.2f}{a:>10}"
              f"{tr:>10.3f}{inf:>11.3f}{'-' if name == 'Exclusive' else f'{tr + inf:.2f}':>8}")
    print(f"(latencies divided by Exclusive's {rows[0][1]:.2f} / {rows[0][2]:.2f} / {rows[0][3]:.2f} ms; "
          f"throughputs by Exclusive's {ex_t['iters_per_s']:.2f} it/s and {ex_i['throughput_rps']:.1f} req/s)")
    history = []
    try:
        slo = json.load(open(f"{out}/status.json"))["gpus"][0]["slo"]
        history = slo["history"]
        print(f"tandemd: duty cycle {slo['duty']:.2f} at the end, gain estimate {slo['gain_estimate']:.2f}, "
              f"{slo['control_periods']} control periods")
    except (OSError, ValueError, KeyError, IndexError):
        print("demo: no control history from tandemd")
    png = plot(out, history, burst, target)
    print(f"demo slo: files in {out}" + (f"; plot {png}" if png else ""))
    with open(f"{out}/summary.json", "w") as f:
        json.dump([dict(zip(("configuration", "p50_ms", "p95_ms", "p99_ms", "slo_attainment", "training", "inference"), r))
                   for r in rows], f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
