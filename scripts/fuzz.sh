#!/usr/bin/env bash
# tandemd's protocol under libFuzzer (tests/fuzz): builds the harness with clang, libFuzzer,
# ASan and UBSan in build-fuzz/ (the normal build keeps gcc), replays the committed corpus
# (the regression inputs among it), then fuzzes for TANDEM_FUZZ_SECONDS (default 60).
# A crash, a leak or a broken daemon invariant fails the run; the input is left in
# build-fuzz/crash-* (reproduce: build-fuzz/bin/fuzz_daemon FILE). Needs clang and
# libclang-rt-dev (scripts/test.sh has setup install them). --build-only: build, run nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
build_only=0
if [ "${1:-}" = --build-only ]; then build_only=1; shift; fi
# ccache, where there is one, makes a rebuild after a small change take seconds.
launcher=$(command -v ccache >/dev/null && echo "-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache" || true)
seconds=${TANDEM_FUZZ_SECONDS:-60}
# shellcheck disable=SC2086  # $launcher: zero or two arguments
CC=clang CXX=clang++ cmake -S . -B build-fuzz -DTANDEM_FUZZ=ON -DTANDEM_WERROR=ON \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo $launcher >/dev/null
cmake --build build-fuzz -j"$(nproc)" --target fuzz_daemon
[ "$build_only" = 0 ] || exit 0
mkdir -p build-fuzz/corpus  # what this machine's runs found, kept between runs
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:halt_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
# libFuzzer runs every input of both directories first (the committed regressions among
# them), then new ones; those go to the first directory, the committed corpus is only read.
build-fuzz/bin/fuzz_daemon -max_total_time="$seconds" -timeout=10 -max_len=8192 -print_final_stats=1 \
  -dict=tests/fuzz/daemon.dict -artifact_prefix=build-fuzz/ build-fuzz/corpus tests/fuzz/corpus
echo "fuzz: no crash in ${seconds} s"
