#!/usr/bin/env bash
# Benchmarks (programs that print figures; not tests). Usage: scripts/bench.sh [--skip-build]
# Prints JSON lines. The launch overhead is measured hook vs no hook in the same process, on
# the same driver, interleaved: against a null driver (tandem's cost alone) and, when it was
# built, against the simulated driver.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "${1:-}" = "--skip-build" ] || scripts/setup.sh --quiet
build/bench/launch_overhead --driver build/bench/libcuda-null.so --tandem build/lib/libtandem.so
fatbin=$(ls build/tests/fixtures/*.fatbin 2>/dev/null | head -1 || true)
if [ -f build/simgpu/libcuda.so.1 ] && [ -n "$fatbin" ]; then
  SIMGPU_DETERMINISTIC=1 build/bench/launch_overhead --driver build/simgpu/libcuda.so.1 \
    --tandem build/lib/libtandem.so --module "$fatbin" --kernel spin_kernel --rounds 300 --batch 100
fi
