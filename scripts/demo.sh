#!/usr/bin/env bash
# The main job: train-sim and infer-sim share one GPU under libtandem.so, and each process's
# view as tandem saw it is printed (launches by entry point, NCCL kernels, memory), beside
# what the examples measured themselves. Runs on the real GPU when nvidia-smi finds one,
# otherwise on the simulated GPU. Usage: scripts/demo.sh [--seconds S]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=5
if [ "${1:-}" = "--seconds" ] && [ -n "${2:-}" ]; then seconds=$2; fi
scripts/setup.sh >/dev/null

if nvidia-smi -L >/dev/null 2>&1; then
  echo "demo: real GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
else
  echo "demo: no GPU found, using the simulated GPU (build/simgpu)"
  export LD_LIBRARY_PATH="$PWD/build/simgpu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
out=$(mktemp -d /tmp/tandem-demo.XXXXXX)
export LD_PRELOAD="$PWD/build/lib/libtandem.so"
export TANDEM_STATS_FILE="$out/stats-%p.json"

TANDEM_ROLE=training build/bin/train-sim --seconds "$seconds" >"$out/train.json" &
train=$!
TANDEM_ROLE=batch-inference build/bin/infer-sim --seconds "$seconds" >"$out/infer.json" &
infer=$!
wait $train
wait $infer
unset LD_PRELOAD
python3 scripts/demo_report.py "$out"
echo "demo: raw files in $out"
