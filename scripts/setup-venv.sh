#!/usr/bin/env bash
# Creates a project-local virtual environment with pinned packages for the tests on the
# simulated GPU:
#   (default) .venv/       PyTorch of tests/requirements-torch.txt (CUDA 13 wheels from PyPI:
#                          NVIDIA's runtime, cuBLAS, cuDNN, NCCL); the PyTorch tests. About 3 GB.
#   --vllm    .venv-vllm/  vLLM of tests/requirements-vllm.txt, which pins its own torch, so it
#                          cannot share .venv; the vLLM tests (docs/llm-serving.md). About 9.4 GB.
#   --sglang  .venv-sglang/ SGLang of tests/requirements-sglang.txt (its own torch again); the SGLang
#                          tests (docs/llm-serving.md). About 11 GB, of which the files identical
#                          to the other venvs' (NVIDIA's libraries) are hardlinked to theirs
#                          (scripts/venv_hardlink.py), so about 4 GB more on disk.
# Idempotent: when the venv already holds exactly these pins it returns at once. The first
# install downloads the wheels (pip keeps them in its cache, so a re-install is fast). Exit
# status 0 when the venv is ready.
# Usage: scripts/setup-venv.sh [--vllm|--sglang] [--quiet]
set -euo pipefail
cd "$(dirname "$0")/.."

requirements=tests/requirements-torch.txt
venv=.venv
size="about 3 GB"
check="import torch"
quiet=
for arg in "$@"; do
  case "$arg" in
    --vllm) requirements=tests/requirements-vllm.txt venv=.venv-vllm size="about 9.4 GB" check="import vllm" ;;
    --sglang) requirements=tests/requirements-sglang.txt venv=.venv-sglang size="about 11 GB" check="import sglang" ;;
    --quiet) quiet=1 ;;
    *) echo "usage: scripts/setup-venv.sh [--vllm|--sglang] [--quiet]" >&2; exit 2 ;;
  esac
done
stamp=$venv/.tandem-requirements
say() { [ -n "$quiet" ] || echo "setup-venv: $*"; }

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
say "installing $requirements (first time: $size of wheels)"
if ! "$venv/bin/python" -m pip install --disable-pip-version-check -q -r "$requirements"; then
  echo "setup-venv: pip install -r $requirements failed" >&2
  exit 1
fi
"$venv/bin/python" -c "$check" || { echo "setup-venv: '$check' fails in $venv" >&2; exit 1; }
# The wheels this venv shares with the project's other venvs keep one copy on disk.
others=()
for v in .venv .venv-vllm .venv-sglang; do
  # Complete ones only (their stamp written): the test command installs them side by side.
  if [ "$v" != "$venv" ] && [ -f "$v/.tandem-requirements" ]; then others+=("$v"); fi
done
if [ ${#others[@]} -gt 0 ]; then say "$(python3 scripts/venv_hardlink.py "$venv" "${others[@]}")"; fi
cp "$requirements" "$stamp"
say "ready after $(( $(date +%s) - start )) s ($(du -sh "$venv" | cut -f1))"
