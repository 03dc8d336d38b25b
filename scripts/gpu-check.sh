#!/usr/bin/env bash
# Runs tandem's checks against the REAL driver on a machine with an NVIDIA GPU:
#  1. builds (scripts/setup.sh), 2. runs the unit, hygiene and interposition fixture tests with
#  the system's libcuda.so.1 instead of the simulated one (simulator-only tests excluded),
#  3. the launch-overhead benchmark against the real driver, 4. a PyTorch smoke run under the
#  hook whose kernel count is compared with the PyTorch profiler's, 5. the fill benchmark
#  (train-sim and infer-sim, then PyTorch's train.py and serve.py) on the real GPU, 6. where
#  NVIDIA's MPS control daemon is installed, one started for the check: live SM partitions
#  (green contexts) with the stream-order fixture, and the slo benchmark's live, split and
#  duty-cycle configurations, 7. memory: the pool's e2e cases on the real driver (safe reuse,
#  pooled allocations inside a stream capture, a killed holder's chunks, a daemon restart, the
#  handover's wake-up, the fast path), the pool benchmark (allocation latency, handover request
#  to usable), PyTorch's allocators side by side
#  (torch_alloc_bench), PyTorch on the pool (torch_memory allocator) and the PyTorch memory
#  scenario on the LIGHT trace (Exclusive, static 50/50, tandem).
# PyTorch: the project's venv, else a python3 that imports torch (TANDEM_TEST_PYTHON).
# Usage: scripts/gpu-check.sh [--skip-build] [--only core,fill,mps,memory]
#   core: steps 2-4; without --only, every step. Output: a summary; details in build/gpu-check/.
# A failed step does not stop the later ones; the exit status is 1 if any failed.
set -uo pipefail
cd "$(dirname "$0")/.."
skip_build=0
only=core,fill,mps,memory
while [ $# -gt 0 ]; do
  case "$1" in
    --skip-build) skip_build=1; shift ;;
    --only) only=${2:?--only needs a list of core, fill, mps, memory}; shift 2 ;;
    *) echo "usage: scripts/gpu-check.sh [--skip-build] [--only core,fill,mps,memory]" >&2; exit 2 ;;
  esac
done
for step in ${only//,/ }; do
  case "$step" in core|fill|mps|memory) ;; *) echo "gpu-check: unknown step '$step' (core, fill, mps, memory)" >&2; exit 2 ;; esac
done
if ! nvidia-smi -L >/dev/null 2>&1; then
  echo "gpu-check: no NVIDIA GPU here (nvidia-smi -L failed); nothing to check" >&2
  exit 1
fi
[ "$skip_build" = 1 ] || scripts/setup.sh || exit 1
failed=""
out=build/gpu-check
mkdir -p "$out"
real_lib=$(ldconfig -p | awk '/libcuda.so.1 .*x86-64|libcuda.so.1 .*AArch64/{print $NF; exit}')
[ -n "$real_lib" ] || real_lib=$(ls /usr/local/nvidia/lib64/libcuda.so.1 /usr/lib/x86_64-linux-gnu/libcuda.so.1 2>/dev/null | head -1)
real_dir=$(dirname "$real_lib")
echo "== GPU: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1); driver dir $real_dir"
fatbin=$(ls build/tests/fixtures/*.fatbin 2>/dev/null | head -1 || true)  # the fixtures' kernels

torch_python=""
if [ -x .venv/bin/python ] && .venv/bin/python -c 'import torch' 2>/dev/null; then torch_python=$PWD/.venv/bin/python
elif python3 -c 'import torch' 2>/dev/null; then torch_python=$(command -v python3)
fi

check_core() {
  echo "== ctest against the real driver (simulator-only and simgpu tests excluded)"
  TANDEM_FIXTURE_DRIVER_DIR="$real_dir" timeout 300 ctest --test-dir build --output-on-failure -j4 \
    -LE 'simulator-only|simgpu|e2e-sim' > "$out/ctest.txt" 2>&1 || failed="$failed ctest"
  tail -15 "$out/ctest.txt"

  echo "== launch overhead (real driver)"
  if [ -n "$fatbin" ]; then
    build/bench/launch_overhead --driver "$real_dir/libcuda.so.1" --tandem build/lib/libtandem.so \
      --module "$fatbin" --kernel spin_kernel --rounds 500 --batch 200 | tee "$out/launch_overhead.json" ||
      failed="$failed launch-overhead"
  fi

  echo "== PyTorch smoke under the hook"
  if [ -n "$torch_python" ]; then
    rm -f "$out"/torch-stats-*.json
    LD_PRELOAD="$PWD/build/lib/libtandem.so" TANDEM_STATS_FILE="$PWD/$out/torch-stats-%p.json" \
      "$torch_python" examples/pytorch/smoke.py | tee "$out/torch-smoke.json" || failed="$failed torch-smoke"
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
    [ $? = 0 ] || failed="$failed torch-kernel-count"
  else
    echo "PyTorch not installed: smoke run skipped"
  fi
}

check_fill() {
  echo "== fill on the real GPU: train-sim beside 1, 2 and 4 infer-sim fillers (policy fill)"
  timeout 180 python3 scripts/bench_fill.py build --real --seconds 3 | tee "$out/fill-sim.jsonl" || failed="$failed fill-sim"
  if [ -n "$torch_python" ]; then
    echo "== fill on the real GPU with PyTorch: train.py beside 4, 2 and 1 serve.py fillers"
    TANDEM_TEST_PYTHON="$torch_python" timeout 400 python3 scripts/bench_fill.py build --real --workload pytorch \
      --seconds 4 | tee "$out/fill-pytorch.jsonl" || failed="$failed fill-pytorch"
  fi
}

check_mps() {
  if command -v nvidia-cuda-mps-control >/dev/null; then
    echo "== MPS: live SM partitions (green contexts) and the slo benchmark"
    export CUDA_MPS_PIPE_DIRECTORY="$PWD/$out/mps-pipe" CUDA_MPS_LOG_DIRECTORY="$PWD/$out/mps-log"
    mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
    if timeout 20 nvidia-cuda-mps-control -d; then
      TANDEM_E2E_REAL_DRIVER=1 timeout 240 python3 tests/e2e/green_e2e.py build order 2>&1 | tee "$out/green-order.txt" ||
        failed="$failed green-order"
      timeout 300 python3 scripts/bench_slo.py build --real --sharing mps --seconds 4 --configs live,split,duty 2>&1 |
        tee "$out/slo-mps.txt" || failed="$failed slo-mps"
      echo quit | timeout 20 nvidia-cuda-mps-control
    else
      echo "MPS control daemon did not start: skipped (logs in $CUDA_MPS_LOG_DIRECTORY)"
    fi
  else
    echo "no nvidia-cuda-mps-control: MPS checks skipped"
  fi
}

check_memory() {
  echo "== memory: the pool's cases on the real driver"
  for case in self markers churn pollution capture crash restart wake fastpath; do
    TANDEM_E2E_REAL_DRIVER=1 timeout 90 python3 tests/e2e/pool_e2e.py build "$fatbin" "$case" > "$out/pool-$case.txt" 2>&1 ||
      failed="$failed pool-$case"
    echo "pool $case: $(tail -1 "$out/pool-$case.txt")"
  done
  echo "== memory: the pool benchmark (256 MiB handovers, 10 rounds per chunk size)"
  TANDEM_E2E_REAL_DRIVER=1 timeout 240 python3 tests/bench/pool_bench.py build "$fatbin" 256 10 2>&1 |
    tee "$out/pool-bench.txt" || failed="$failed pool-bench"
  [ -n "$torch_python" ] || { echo "PyTorch not installed: its memory checks skipped"; return; }
  echo "== memory: PyTorch's allocators side by side"
  TANDEM_E2E_REAL_DRIVER=1 TANDEM_TEST_PYTHON="$torch_python" timeout 240 python3 tests/bench/torch_alloc_bench.py build \
    --rounds 1 2>&1 | tee "$out/torch-alloc.txt" || failed="$failed torch-alloc"
  TANDEM_E2E_REAL_DRIVER=1 TANDEM_TEST_PYTHON="$torch_python" timeout 180 python3 tests/e2e/torch_memory_e2e.py build \
    allocator > "$out/torch-memory-allocator.txt" 2>&1 || failed="$failed torch-memory-allocator"
  tail -3 "$out/torch-memory-allocator.txt"
  echo "== memory: the PyTorch memory scenario, LIGHT trace (Exclusive, static 50/50, tandem)"
  TANDEM_DEMO_CONFIGS="static 50/50,tandem" timeout 300 "$torch_python" scripts/demo_memory_pytorch.py build \
    "$out/memory-pytorch" 16 light 2>&1 | tee "$out/memory-pytorch.txt" || failed="$failed memory-pytorch"
}

for step in ${only//,/ }; do "check_$step"; done

if [ -n "$failed" ]; then
  echo "gpu-check: FAILED:$failed (details in $out/)"
  exit 1
fi
echo "gpu-check: all steps passed"
