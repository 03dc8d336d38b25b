#!/usr/bin/env bash
# Runs tandem's checks against the REAL driver on a machine with an NVIDIA GPU:
#  1. builds (scripts/setup.sh), 2. runs the unit, hygiene and interposition fixture tests with
#  the system's libcuda.so.1 instead of the simulated one (simulator-only tests excluded),
#  3. the launch-overhead benchmark against the real driver, 4. a PyTorch smoke run under the
#  hook whose kernel count is compared with the PyTorch profiler's.
# Usage: scripts/gpu-check.sh [--skip-build]    Output: a summary; details in build/gpu-check/.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! nvidia-smi -L >/dev/null 2>&1; then
  echo "gpu-check: no NVIDIA GPU here (nvidia-smi -L failed); nothing to check" >&2
  exit 1
fi
[ "${1:-}" = "--skip-build" ] || scripts/setup.sh
out=build/gpu-check
mkdir -p "$out"
real_dir=$(dirname "$(ldconfig -p | awk '/libcuda.so.1 .*x86-64|libcuda.so.1 .*AArch64/{print $NF; exit}')")
echo "== GPU: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1); driver dir $real_dir"

echo "== ctest against the real driver (simulator-only and simgpu tests excluded)"
TANDEM_FIXTURE_DRIVER_DIR="$real_dir" ctest --test-dir build --output-on-failure \
  -LE 'simulator-only|simgpu|e2e-sim' 2>&1 | tee "$out/ctest.txt" | tail -15

echo "== launch overhead (real driver)"
fatbin=$(ls build/tests/fixtures/*.fatbin 2>/dev/null | head -1 || true)
if [ -n "$fatbin" ]; then
  build/bench/launch_overhead --driver "$real_dir/libcuda.so.1" --tandem build/lib/libtandem.so \
    --module "$fatbin" --kernel spin_kernel --rounds 500 --batch 200 | tee "$out/launch_overhead.json"
fi

echo "== PyTorch smoke under the hook"
if python3 -c 'import torch' 2>/dev/null; then
  rm -f "$out"/torch-stats-*.json
  LD_PRELOAD="$PWD/build/lib/libtandem.so" TANDEM_STATS_FILE="$PWD/$out/torch-stats-%p.json" \
    python3 examples/pytorch/smoke.py | tee "$out/torch-smoke.json"
  python3 - "$out" <<'PY'
import glob, json, sys
out = sys.argv[1]
smoke = json.loads(open(f"{out}/torch-smoke.json").read().strip().splitlines()[-1])
stats = [json.load(open(p)) for p in glob.glob(f"{out}/torch-stats-*.json")]
hook = sum(s["launches"]["total"] for s in stats)
prof = smoke["profiler_kernels"]
print(json.dumps({"hook_kernels": hook, "profiler_kernels": prof,
                  "ratio": round(hook / prof, 4) if prof else None,
                  "graph_launches": sum(s["launches"]["graph_launches"] for s in stats),
                  "by_entry": stats[0]["launches"]["by_entry"] if stats else {}}))
sys.exit(0 if prof and abs(hook - prof) <= max(2, 0.02 * prof) else 1)
PY
else
  echo "PyTorch not installed: smoke run skipped"
fi
