#!/usr/bin/env bash
# The inference-first scenario (tandemd --policy slo): online inference (infer-sim, Poisson
# arrivals at half its capacity, then a burst at 3/4 of it) shares the GPU with training
# (train-sim). Four configurations: Exclusive training, Exclusive inference, Co-Exec (both, no
# tandem), tandem (both under libtandem.so, tandemd --policy slo, the latency target set to
# Exclusive's p99 plus 10%). Prints a table of latency percentiles normalized to Exclusive, SLO
# attainment and throughputs, and plots latency and training's duty cycle over time.
# Called by scripts/demo.sh (which builds and picks the GPU); usage: demo_slo.sh OUT_DIR SECONDS
set -euo pipefail
cd "$(dirname "$0")/.."
out=$1
seconds=$2
mkdir -p "$out"
# Training with short kernels and a short collective: the simulated GPU switches processes
# only between kernels (a real GPU preempts at its time slice), see docs/scheduler.md.
train=(build/bin/train-sim --kernel-us 200 --compute-kernels 100 --comm-us 500 --gap-us 11500)
capacity=$(build/bin/infer-sim --seconds 1.5 --closed-loop | tail -1 | python3 -c 'import json,sys; print(json.load(sys.stdin)["throughput_rps"])')
rate=$(python3 -c "print(f'{0.5 * $capacity:.1f}')")
burst=$(python3 -c "print(f'{$seconds * 0.4:.1f}:{0.75 * $capacity:.1f}:{$seconds * 0.2:.1f}')")
infer=(build/bin/infer-sim --seconds "$seconds" --rate "$rate" --burst "$burst" --warmup-seconds 1.5)
echo "demo slo: inference at $rate requests/s (half of its capacity), a burst $burst (at:rate:seconds)"

echo "demo slo: 1/4 exclusive training";  "${train[@]}" --seconds "$seconds" >"$out/exclusive-train.json"
echo "demo slo: 2/4 exclusive inference"; "${infer[@]}" >"$out/exclusive-infer.json"
slo_ms=$(python3 -c "import json; print(max(1, int(1.1 * json.load(open('$out/exclusive-infer.json'))['p99_ms'])))")
echo "demo slo: 3/4 co-exec (no tandem)"
"${train[@]}" --seconds "$seconds" >"$out/coexec-train.json" & a=$!
"${infer[@]}" --slo-ms "$slo_ms" >"$out/coexec-infer.json" & b=$!
wait $a $b

echo "demo slo: 4/4 tandem (slo policy, target p99 $slo_ms ms)"
export TANDEM_SOCKET="$out/tandemd.sock"
build/bin/tandemd --foreground --policy slo --socket "$TANDEM_SOCKET" --log warn 2>"$out/tandemd.log" & daemon=$!
trap 'kill $daemon 2>/dev/null || true' EXIT
for _ in $(seq 50); do [ -S "$TANDEM_SOCKET" ] && break; sleep 0.1; done
LD_PRELOAD="$PWD/build/lib/libtandem.so" TANDEM_ROLE=training "${train[@]}" --seconds "$seconds" >"$out/tandem-train.json" & a=$!
LD_PRELOAD="$PWD/build/lib/libtandem.so" TANDEM_ROLE=inference TANDEM_SLO_MS="$slo_ms" \
  "${infer[@]}" --slo-ms "$slo_ms" >"$out/tandem-infer.json" & b=$!
wait $b
build/bin/tandemctl status --json >"$out/status.json" || echo "demo slo: no status from tandemd"
wait $a
kill $daemon; wait $daemon 2>/dev/null || true
trap - EXIT
py=$(command -v /usr/bin/python3 || command -v python3)
"$py" scripts/demo_slo_report.py "$out" "$burst"
