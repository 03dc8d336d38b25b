#!/usr/bin/env bash
# The test command: sets up, builds with warnings as errors, runs every test with ctest.
# Extra arguments go to ctest (e.g. scripts/test.sh -L fixture).
set -euo pipefail
cd "$(dirname "$0")/.."
TANDEM_CMAKE_ARGS="-DTANDEM_WERROR=ON ${TANDEM_CMAKE_ARGS:-}" scripts/setup.sh
ctest --test-dir build --output-on-failure -j2 "$@"
