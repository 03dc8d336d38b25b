#!/usr/bin/env python3
"""T_idle and W for the memory scenario's shared runs (scripts/demo_memory.sh), from SIRIUS's
queueing model (examples/pytorch/sirius_model.py) fed with what the server measured alone in
the Exclusive run: its request rate, its warm service time (p50) and its cold-start time (p50).

usage: demo_memory_sirius.py OUT_DIR TARGET
Prints "IDLE_MS WATERMARK_MB" and writes OUT_DIR/sirius.json (the model's answer, for the report).
The timer is infer-sim's: a release exactly T_idle after a model's last request ("fixed").
"""
import json
import os
import sys

from demo_memory_report import load

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples", "pytorch"))
import sirius_model  # noqa: E402


def main():
    out, target = sys.argv[1], float(sys.argv[2])
    alone = load(f"{out}/exclusive-infer.json")
    answer = sirius_model.search(rate=alone["requests"] / alone["elapsed_s"], service_ms=alone["p50_ms"],
                                 load_ms=alone["load_p50_ms"], model_mb=alone["model_mb"], models=alone["models"],
                                 slo_ms=alone["slo_ms"], target=target, timer="fixed")
    with open(f"{out}/sirius.json", "w") as f:
        json.dump(answer, f)
    if answer.get("idle_ms") is None or answer.get("watermark_mb") is None:
        sys.exit(f"demo memory: SIRIUS's model reaches no T_idle and W for a compliance of {target}: {answer}")
    print(int(round(answer["idle_ms"])), int(round(answer["watermark_mb"])))


if __name__ == "__main__":
    main()
