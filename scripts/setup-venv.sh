#!/usr/bin/env bash
# Creates the project-local virtual environment .venv/ with the pinned PyTorch of
# tests/requirements-torch.txt (CUDA 13 wheels from PyPI: NVIDIA's runtime, cuBLAS, cuDNN,
# NCCL), which the PyTorch tests run on the simulated GPU. Idempotent: when .venv/ already
# holds exactly these pins it returns at once. The first install downloads about 3 GB (pip
# keeps them in its cache, so a re-install is fast). Exit status 0 when the venv is ready.
# Usage: scripts/setup-venv.sh [--quiet]
set -euo pipefail
cd "$(dirname "$0")/.."

requirements=tests/requirements-torch.txt
venv=.venv
stamp=$venv/.tandem-requirements
quiet=${1:-}
say() { [ "$quiet" = --quiet ] || echo "setup-venv: $*"; }

# Ready when the stamp is the requirements file we would install (byte for byte).
if [ -x "$venv/bin/python" ] && [ -f "$stamp" ] && cmp -s "$stamp" "$requirements"; then
  say "$venv is up to date"
  exit 0
fi

python=${TANDEM_PYTHON:-python3}
if [ ! -x "$venv/bin/python" ]; then
  say "creating $venv with $("$python" --version 2>&1)"
  if ! "$python" -m venv "$venv"; then
    echo "setup-venv: '$python -m venv' failed (on Debian: apt-get install python3-venv)" >&2
    rm -rf "$venv"
    exit 1
  fi
fi
start=$(date +%s)
say "installing $requirements (first time: about 3 GB of wheels)"
if ! "$venv/bin/python" -m pip install --disable-pip-version-check -q -r "$requirements"; then
  echo "setup-venv: pip install -r $requirements failed" >&2
  exit 1
fi
"$venv/bin/python" -c "import torch" || { echo "setup-venv: torch does not import" >&2; exit 1; }
cp "$requirements" "$stamp"
say "ready after $(( $(date +%s) - start )) s ($(du -sh "$venv" | cut -f1))"
