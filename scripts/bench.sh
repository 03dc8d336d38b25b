#!/usr/bin/env bash
# Benchmarks (programs that print figures; not tests). Usage: scripts/bench.sh [--skip-build]
# Prints JSON lines. The launch overhead is measured hook vs no hook in the same process, on
# the same driver, interleaved: against a null driver (tandem's cost alone) and, when it was
# built, against the simulated driver.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "${1:-}" = "--skip-build" ] || scripts/setup.sh --quiet
build/bench/launch_overhead --driver build/bench/libcuda-null.so --tandem build/lib/libtandem.so
# The same, registered with a tandemd (no training present: the gate is open) as training and as
# a batch-inference filler, whose launch also looks its shape's cost up and takes tokens
# (docs/benchmarks.md). --settle-ms: registration happens on the progress thread meanwhile.
sock=$(mktemp -u /tmp/tandem-bench-XXXXXX.sock)
build/bin/tandemd --foreground --socket "$sock" --log warn --policy fill &
daemon=$!
trap 'kill $daemon 2>/dev/null; rm -f "$sock"' EXIT
for _ in $(seq 100); do [ -e "$sock" ] && break; sleep 0.05; done
for role in training batch-inference; do
  TANDEM_ROLE=$role TANDEM_SOCKET=$sock build/bench/launch_overhead --driver build/bench/libcuda-null.so \
    --tandem build/lib/libtandem.so --settle-ms 300
done
fatbin=$(ls build/tests/fixtures/*.fatbin 2>/dev/null | head -1 || true)
if [ -f build/simgpu/libcuda.so.1 ] && [ -n "$fatbin" ]; then
  SIMGPU_DETERMINISTIC=1 build/bench/launch_overhead --driver build/simgpu/libcuda.so.1 \
    --tandem build/lib/libtandem.so --module "$fatbin" --kernel spin_kernel --rounds 300 --batch 100
fi
