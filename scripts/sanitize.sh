#!/usr/bin/env bash
# The unit tests and the end-to-end tests that are not timing ratios (daemon smoke, memory
# quota, memory pool) built with ASan + UBSan (gcc) in build-asan/ and run with halt_on_error:
# tandemd, tandemctl, the unit tests, the fixtures and the simulated driver are sanitized
# programs, and the sanitized libtandem.so is preloaded into the fixtures, which carry ASan's
# runtime (docs/sanitizers.md says what can be run sanitized and how). Extra arguments go to ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
# ccache, where there is one, makes a rebuild after a small change take seconds.
launcher=$(command -v ccache >/dev/null && echo "-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache" || true)
cuda_home=${CUDA_HOME:-/usr/local/cuda}
export PATH="$cuda_home/bin:$PATH"
# Debug (-O0): gcc with UBSan spends many minutes optimizing the daemon's JSON code at -O2.
# shellcheck disable=SC2086  # $launcher: zero or two arguments
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DCUDA_HOME="$cuda_home" \
  -DTANDEM_SANITIZE=address,undefined -DTANDEM_WERROR=ON $launcher >/dev/null
# Only what the selected tests run: the whole tree sanitized would cost the build minutes.
cmake --build build-asan -j"$(nproc)" --target tandem_unit_tests tandemd tandemctl tandem simgpu \
  fixture_mem_quota fixture_pool_probe
export ASAN_OPTIONS=${ASAN_OPTIONS:-halt_on_error=1:detect_leaks=1}
# The e2e tests preload libtandem.so; ASan's runtime must be the first library of a process.
TANDEM_TEST_PRELOAD_FIRST=$(gcc -print-file-name=libasan.so)
export TANDEM_TEST_PRELOAD_FIRST
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
ctest --test-dir build-asan --output-on-failure -j2 \
  -R '^(unit|e2e_daemon_smoke|e2e_mem_(quota|pressure)|e2e_pool_(self|pollution|crash|restart))$' "$@"
