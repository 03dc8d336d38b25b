#!/usr/bin/env bash
# The test command: sets up, builds with warnings as errors, runs every test with ctest, then
# the unit and non-timing end-to-end tests under ASan + UBSan (scripts/sanitize.sh) and the
# protocol fuzzer for a bounded time (scripts/fuzz.sh).
# Extra arguments go to ctest (e.g. scripts/test.sh -L fixture); a run given them, or
# TANDEM_TEST_SANITIZERS=0, runs only that ctest selection.
set -euo pipefail
cd "$(dirname "$0")/.."
# podman, runc and mmdebstrap for the real-container test (e2e_containers_*, docs/kubernetes.md).
TANDEM_EXTRA_PACKAGES="clang libclang-rt-dev podman runc mmdebstrap" scripts/setup.sh --packages
sanitizers=0
if [ $# -eq 0 ] && [ "${TANDEM_TEST_SANITIZERS:-1}" != 0 ]; then sanitizers=1; fi
# The venvs for the framework tests, installed side by side in the background while tandem and
# the sanitizer and fuzzer builds compile: an install is mostly one core's unpacking, so one
# after the other they left the second core idle for ten minutes. Each writes its log into
# build/, shown once it ended. One that cannot be created skips its tests, which say why;
# everything else still runs.
#   PyTorch (.venv/): the e2e_torch_* tests.
#   vLLM (.venv-vllm/, 9.4 GB, its own torch): e2e_vllm_*; TANDEM_TEST_VLLM=0 skips it.
#   SGLang (.venv-sglang/, about 4 GB more on disk, its own torch): e2e_sglang_*;
#   TANDEM_TEST_SGLANG=0 skips it.
mkdir -p build
# Room on disk first: a full disk fails a compile or an unpacking half-way, with a message about
# a temporary file. What the missing venvs take while they install (before their shared wheels
# are linked), pip's unpacking, and the three builds, in GB.
need=3
[ -f .venv/.tandem-requirements ] || need=$((need + 6))
[ "${TANDEM_TEST_VLLM:-1}" = 0 ] || [ -f .venv-vllm/.tandem-requirements ] || need=$((need + 10))
[ "${TANDEM_TEST_SGLANG:-1}" = 0 ] || [ -f .venv-sglang/.tandem-requirements ] || need=$((need + 11))
[ "$need" = 3 ] || need=$((need + 3))
free=$(( $(df -Pk . | awk 'NR == 2 {print $4}') / 1024 / 1024 ))
if [ "$free" -lt "$need" ]; then
  echo "test: about $need GB of disk are needed here ($PWD) and $free GB are free. Free some, or skip" \
       "the largest venvs with TANDEM_TEST_SGLANG=0 (11 GB) and TANDEM_TEST_VLLM=0 (10 GB)." >&2
  exit 1
fi
declare -A venv_pid
start_venv() {  # NAME [setup-venv.sh's flag]: in a process group of its own (pip's with it)
  setsid scripts/setup-venv.sh "${@:2}" >"build/setup-venv-$1.log" 2>&1 &
  venv_pid[$1]=$!
}
# A failed build, or ^C, leaves no install running.
trap 'for pid in "${venv_pid[@]}"; do kill -- "-$pid" 2>/dev/null || true; done' EXIT
start_venv PyTorch
[ "${TANDEM_TEST_VLLM:-1}" = 0 ] || start_venv vLLM --vllm
[ "${TANDEM_TEST_SGLANG:-1}" = 0 ] || start_venv SGLang --sglang
TANDEM_CMAKE_ARGS="-DTANDEM_WERROR=ON ${TANDEM_CMAKE_ARGS:-}" scripts/setup.sh
if [ "$sanitizers" = 1 ]; then
  scripts/sanitize.sh --build-only
  scripts/fuzz.sh --build-only
fi
for name in PyTorch vLLM SGLang; do
  [ -n "${venv_pid[$name]:-}" ] || continue
  status=0
  wait "${venv_pid[$name]}" || status=$?
  cat "build/setup-venv-$name.log"
  [ "$status" = 0 ] || echo "test: the $name venv could not be created; the $name tests will be skipped" >&2
done
trap - EXIT
# The simulated GPU's shared segments of earlier runs of this build (fixed names for
# tests/simgpu, tagged with the build directory) and of killed tests (named after a pid no
# longer running): one left by a killed process may name an owner whose pid is alive again, and
# that test's GPU would never be free. Another checkout's tests, running now, keep theirs.
tag=$(printf %s "$(cd build && pwd -P)" | md5sum | cut -c1-8)
rm -f /dev/shm/simgpu-test-"$tag"-* 2>/dev/null || true
for segment in /dev/shm/simgpu-e2e-* /dev/shm/simgpu-fixture-*; do
  [ -e "$segment" ] || continue
  name=${segment#/dev/shm/simgpu-}  # e2e-PID[-...] or fixture-PID[-...]
  pid=${name#*-}
  pid=${pid%%-*}
  [ -d "/proc/$pid" ] || rm -f "$segment"
done
if ! ctest --test-dir build --output-on-failure -j2 "$@"; then
  # A test labelled timing asserts a time ratio measured on this machine, where another
  # program's burst, or the machine's own slower spells, can cost a run its bound: each that
  # failed runs again alone, up to twice, and must pass once. Any other failure, or a timing
  # test failing three times, fails the run.
  failed=$(cut -d: -f2 build/Testing/Temporary/LastTestsFailed.log)
  [ -n "$failed" ] || exit 1
  timing=$(ctest --test-dir build -N -L timing | sed -n 's/^ *Test *#[0-9]*: //p')
  for name in $failed; do
    grep -qx "$name" <<<"$timing" || { echo "test: $name failed" >&2; exit 1; }
  done
  for rerun in 1 2; do
    echo "test: timing tests that failed, running them again alone (rerun $rerun of 2):" $failed >&2
    if ctest --test-dir build --output-on-failure -R "^($(tr '\n' '|' <<<"$failed" | sed 's/|$//'))\$"; then
      break
    fi
    [ $rerun -lt 2 ] || exit 1
    failed=$(cut -d: -f2 build/Testing/Temporary/LastTestsFailed.log)
  done
fi
if [ "$sanitizers" = 1 ]; then
  scripts/sanitize.sh
  scripts/fuzz.sh
fi
