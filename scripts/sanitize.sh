#!/usr/bin/env bash
# The unit tests and the end-to-end tests that are not timing ratios (daemon smoke, memory
# quota, memory pool) built with ASan + UBSan (gcc) in build-asan/ and run with halt_on_error:
# tandemd, tandemctl, the unit tests, the fixtures and the simulated driver are sanitized.
# The fixtures preload the normal build's libtandem.so behind ASan's runtime (a sanitized
# libtandem.so crashes there; docs/sanitizers.md), so run scripts/setup.sh first (test.sh
# does). Extra arguments go to both ctest runs; --build-only first: build, run nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
build_only=0
if [ "${1:-}" = --build-only ]; then build_only=1; shift; fi
# ccache, where there is one, makes a rebuild after a small change take seconds.
launcher=$(command -v ccache >/dev/null && echo "-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache" || true)
cuda_home=${CUDA_HOME:-/usr/local/cuda}
export PATH="$cuda_home/bin:$PATH"
# Debug (-O0): gcc with UBSan spends many minutes optimizing the daemon's JSON code at -O2.
# shellcheck disable=SC2086  # $launcher: zero or two arguments
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DCUDA_HOME="$cuda_home" \
  -DTANDEM_SANITIZE=address,undefined -DTANDEM_WERROR=ON $launcher >/dev/null
# Only what the selected tests run: the whole tree sanitized would cost the build minutes.
cmake --build build-asan -j"$(nproc)" --target tandem_unit_tests tandemd tandemctl simgpu \
  fixture_mem_quota fixture_pool_probe
[ "$build_only" = 0 ] || exit 0
libtandem=$PWD/build/lib/libtandem.so
[ -f "$libtandem" ] || { echo "sanitize: $libtandem is missing: run scripts/setup.sh first" >&2; exit 1; }
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
ASAN_OPTIONS=${ASAN_OPTIONS:-halt_on_error=1:detect_leaks=1} ctest --test-dir build-asan --output-on-failure -R '^unit$' "$@"
# ASan's runtime must be the first library of a process that preloads libtandem.so. Leaks are
# not checked here: the test programs keep their modules to exit (the fuzzer checks tandemd's).
TANDEM_TEST_PRELOAD="$(gcc -print-file-name=libasan.so):$libtandem"
export TANDEM_TEST_PRELOAD
ASAN_OPTIONS=${ASAN_OPTIONS:-halt_on_error=1:detect_leaks=0} ctest --test-dir build-asan --output-on-failure -j2 \
  -R '^(e2e_daemon_smoke|e2e_mem_(quota|pressure)|e2e_pool_(self|pollution|crash|restart))$' "$@"
