#!/usr/bin/env bash
# The inference-first scenario (tandemd --policy slo): online inference (infer-sim, 4 x 1 ms
# kernels on half the GPU per request, Poisson arrivals at half its capacity, then a burst at
# 3/4 of it) shares the GPU with realistic data-parallel training (train-sim: 20 x 1 ms kernels
# on the whole GPU, a 6 ms NCCL all-reduce, 4 ms of host work per step). Four configurations:
# Exclusive training, Exclusive inference, Co-Exec (both, no tandem), tandem (both under
# libtandem.so, tandemd --policy slo, the latency target set to Exclusive's p99 plus 10%).
# On the simulated GPU it runs twice, side by side: time slicing (a GPU without MPS; the
# collective is not held: holding it, TANDEM_JOB_LOCAL=1, measured no better, docs/slo.md) and
# MPS (SIMGPU_SHARING=mps; training asks MPS for half the SMs, TANDEM_SLO_TRAINING_SMS=50). Prints a table per mode and plots latency and training's duty
# cycle. On a real GPU it runs once, as the GPU is set up.
# Called by scripts/demo.sh (which builds and picks the GPU); usage: demo_slo.sh OUT_DIR SECONDS
set -euo pipefail
cd "$(dirname "$0")/.."
out=$1
seconds=$2
mkdir -p "$out"
train=(build/bin/train-sim --compute-kernels 20 --kernel-us 1000 --comm-us 6000 --gap-us 4000)
infer_request=(--kernels 4 --kernel-us 1000 --blocks 66)

# One sharing mode into $1 (SIMGPU_SHARING as exported), with $2... as tandem's settings for training.
scenario() {
  local dir=$1
  shift
  mkdir -p "$dir"
  local capacity rate burst slo_ms daemon a b
  capacity=$(build/bin/infer-sim --seconds 1.5 --closed-loop "${infer_request[@]}" | tail -1 |
             python3 -c 'import json,sys; print(json.load(sys.stdin)["throughput_rps"])')
  rate=$(python3 -c "print(f'{0.5 * $capacity:.1f}')")
  burst=$(python3 -c "print(f'{$seconds * 0.4:.1f}:{0.75 * $capacity:.1f}:{$seconds * 0.2:.1f}')")
  local infer=(build/bin/infer-sim "${infer_request[@]}" --seconds "$seconds" --rate "$rate" --burst "$burst" --warmup-seconds 1.5)
  echo "demo slo ($dir): inference at $rate requests/s (half of its capacity), a burst $burst (at:rate:seconds)"
  echo "demo slo: 1/4 exclusive training";  "${train[@]}" --seconds "$seconds" >"$dir/exclusive-train.json"
  echo "demo slo: 2/4 exclusive inference"; "${infer[@]}" >"$dir/exclusive-infer.json"
  slo_ms=$(python3 -c "import json; print(max(1, int(1.1 * json.load(open('$dir/exclusive-infer.json'))['p99_ms'])))")
  echo "demo slo: 3/4 co-exec (no tandem)"
  "${train[@]}" --seconds "$seconds" >"$dir/coexec-train.json" & a=$!
  "${infer[@]}" --slo-ms "$slo_ms" >"$dir/coexec-infer.json" & b=$!
  wait $a $b
  echo "demo slo: 4/4 tandem (slo policy, target p99 $slo_ms ms; training: $*)"
  export TANDEM_SOCKET="$dir/tandemd.sock"
  build/bin/tandemd --foreground --policy slo --socket "$TANDEM_SOCKET" --log warn 2>"$dir/tandemd.log" & daemon=$!
  trap 'kill $daemon 2>/dev/null || true' EXIT
  for _ in $(seq 50); do [ -S "$TANDEM_SOCKET" ] && break; sleep 0.1; done
  env "$@" LD_PRELOAD="$PWD/build/lib/libtandem.so" TANDEM_ROLE=training "${train[@]}" --seconds "$seconds" \
    >"$dir/tandem-train.json" & a=$!
  LD_PRELOAD="$PWD/build/lib/libtandem.so" TANDEM_ROLE=inference TANDEM_SLO_MS="$slo_ms" \
    "${infer[@]}" --slo-ms "$slo_ms" >"$dir/tandem-infer.json" & b=$!
  wait $b
  build/bin/tandemctl status --json >"$dir/status.json" || echo "demo slo: no status from tandemd"
  wait $a
  kill $daemon; wait $daemon 2>/dev/null || true
  trap - EXIT
  echo "$burst" >"$dir/burst"
}

py=$(command -v /usr/bin/python3 || command -v python3)
if [ -n "${SIMGPU_SHM:-}" ]; then  # the simulated GPU (scripts/demo.sh): both ways of sharing it
  SIMGPU_SHARING=timeslice scenario "$out/timeslice" TANDEM_JOB_LOCAL=0
  SIMGPU_SHARING=mps scenario "$out/mps" TANDEM_SLO_TRAINING_SMS=50
  for mode in timeslice mps; do
    echo
    echo "== $mode =="
    "$py" scripts/demo_slo_report.py "$out/$mode" "$(cat "$out/$mode/burst")"
  done
else
  scenario "$out" TANDEM_JOB_LOCAL=0
  "$py" scripts/demo_slo_report.py "$out" "$(cat "$out/burst")"
fi
