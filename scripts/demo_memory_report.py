#!/usr/bin/env python3
"""The memory scenario's table (scripts/demo_memory.sh), from the examples' JSON output, the
statistics files of the shared runs and tandemd's status.

usage: demo_memory_report.py OUT_DIR
Training throughput is samples per second (batch x iterations) over Exclusive's; inference
latency is from each request's arrival (cold starts included) in ms, beside Exclusive's.
Handover: tandemd's time from an inference process's request for memory to the last chunk
passed, and the inference process's time from its allocation to memory it can use (zero-filled).
"""
import json
import os
import sys


def load(path, last_line=True):
    try:
        text = open(path).read()
    except OSError:
        return {}
    if not last_line:
        return json.loads(text)
    lines = [l for l in text.splitlines() if l.startswith("{")]
    return json.loads(lines[-1]) if lines else {}


def main():
    out = sys.argv[1]
    alone_t = load(f"{out}/exclusive-train.json")
    alone_i = load(f"{out}/exclusive-infer.json")
    rows = [("Exclusive", alone_t, alone_i, None, None)]
    for name, label in (("static", "static 50/50"), ("pool", "tandem pool")):
        status = load(f"{out}/{name}-status.json", last_line=False)
        stats = load(f"{out}/{name}-infer-stats.json", last_line=False)
        pool = status["gpus"][0]["pool"] if status.get("gpus") else None
        rows.append((label, load(f"{out}/{name}-train.json"), load(f"{out}/{name}-infer.json"), pool,
                     stats.get("memory", {}).get("pool")))
    base_t = alone_t.get("samples_per_s") or 1
    print()
    print("memory scenario: training and online inference in 1 GiB of GPU memory "
          f"(six models of {alone_i.get('model_mb', 0):.0f} MiB, BURST trace; training samples of 32 MiB)")
    print(f"{'':<14}{'train samples/s':>16}{'x excl':>8}{'batch':>7}{'shrink/grow':>12}"
          f"{'infer p50':>10}{'p99 ms':>8}{'SLO 100':>8}{'cold':>6}{'evict':>6}  handovers")
    for label, t, i, pool, own in rows:
        hand = "-"
        if pool and pool.get("handovers"):
            mean_ms = own["handover_ns_total"] / own["handovers"] / 1e6 if own and own.get("handovers") else 0
            hand = (f"{pool['handovers']} (tandemd last {pool['handover_last_ms']:.0f} / max {pool['handover_max_ms']:.0f} ms;"
                    f" usable after {mean_ms:.0f} ms mean, {own['handover_ns_max'] / 1e6:.0f} max)" if own else
                    f"{pool['handovers']}")
        if not t or not i:
            print(f"{label:<14}missing output in {out}")
            continue
        print(f"{label:<14}{t['samples_per_s']:>16.1f}{t['samples_per_s'] / base_t:>8.2f}{t['batch_mean']:>7.1f}"
              f"{t['shrinks']:>6}/{t['grows']:<5}{i['p50_ms']:>10.1f}{i['p99_ms']:>8.1f}{i['slo_attainment']:>8.2f}"
              f"{i['cold_starts']:>6}{i['evictions']:>6}  {hand}")
    print("(batch: mean samples per iteration, at most 24; SLO 100: share of requests within 100 ms;"
          " cold: model loads; evict: models unloaded for want of memory)")
    model = load(f"{out}/sirius.json", last_line=False)
    if model:
        print(f"(shared runs: T_idle {model['idle_ms']:.0f} ms and W {model['watermark_mb']:.0f} MiB from SIRIUS's "
              f"queueing model for a compliance of {model['target']}, which it predicts {model['compliance']:.3f}; "
              f"Exclusive inference with T_idle 1000 ms)")


if __name__ == "__main__":
    main()
