#!/usr/bin/env bash
# The test command: sets up, builds with warnings as errors, runs every test with ctest.
# Extra arguments go to ctest (e.g. scripts/test.sh -L fixture).
set -euo pipefail
cd "$(dirname "$0")/.."
TANDEM_CMAKE_ARGS="-DTANDEM_WERROR=ON ${TANDEM_CMAKE_ARGS:-}" scripts/setup.sh
# PyTorch for the e2e_torch_* tests (.venv/; fast when already there). If it cannot be created
# those tests are skipped and say why; everything else still runs.
scripts/setup-venv.sh || echo "test: the PyTorch venv could not be created; the PyTorch tests will be skipped" >&2
ctest --test-dir build --output-on-failure -j2 "$@"
