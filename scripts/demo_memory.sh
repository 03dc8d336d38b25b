#!/usr/bin/env bash
# The memory scenario (docs/memory.md): training (train-sim --elastic, a batch of 32 MiB samples)
# and online inference (infer-sim: six models of 96 MiB loaded on first request and released
# after T_idle idle, SIRIUS's BURST request trace) share a GPU of 1 GiB (TANDEM_MEM_LIMIT, the
# same on a real GPU and on the simulated one). Four configurations: Exclusive training and
# Exclusive inference (each alone; the server's T_idle 1 s), a static 50/50 split (each process a
# 512 MiB quota), and tandem's pool (one 1 GiB pool: inference's loads take memory from training,
# which shrinks its batch and regrows when the models are released). Both shared runs use
# tandemd's fill policy, and T_idle and the watermark W from SIRIUS's queueing model for a
# compliance of TANDEM_DEMO_MEMORY_TARGET (0.99), fed with what the server measured alone
# (scripts/demo_memory_sirius.py; docs/memory.md says why 0.99).
# Called by scripts/demo.sh (which builds and picks the GPU); usage: demo_memory.sh OUT_DIR SECONDS
set -euo pipefail
cd "$(dirname "$0")/.."
out=$1
seconds=$2
mkdir -p "$out"
train=(build/bin/train-sim --seconds "$seconds" --mem-mb 64 --sample-mb 32 --batch 24 --elastic
       --kernel-us 200 --compute-kernels 100 --comm-us 500 --gap-us 11500)
infer=(build/bin/infer-sim --seconds "$seconds" --models 6 --model-mb 96 --mem-mb 0
       --trace burst --interval-s 2 --seed 3 --slo-ms 100)
export TANDEM_MEM_CHUNK=32M
py=$(command -v /usr/bin/python3 || command -v python3)

echo "demo memory: 1/4 exclusive training";  "${train[@]}" >"$out/exclusive-train.json" 2>"$out/exclusive-train.err"
echo "demo memory: 2/4 exclusive inference"; "${infer[@]}" --idle-ms 1000 >"$out/exclusive-infer.json"
read -r idle_ms watermark_mb < <("$py" scripts/demo_memory_sirius.py "$out" "${TANDEM_DEMO_MEMORY_TARGET:-0.99}")
infer+=(--idle-ms "$idle_ms")
export TANDEM_MEM_WATERMARK=$([ "$watermark_mb" -gt 0 ] && echo "${watermark_mb}M" || true)
echo "demo memory: shared runs with T_idle $idle_ms ms and W $watermark_mb MiB (SIRIUS's model)"

# Both processes under libtandem.so beside tandemd; $1: the configuration's name, then settings.
shared() {
  local name=$1
  shift
  export TANDEM_SOCKET="$out/$name.sock"
  build/bin/tandemd --foreground --socket "$TANDEM_SOCKET" --log info 2>"$out/$name-tandemd.log" & daemon=$!
  trap 'kill $daemon 2>/dev/null || true' EXIT
  for _ in $(seq 50); do [ -S "$TANDEM_SOCKET" ] && break; sleep 0.1; done
  env "$@" LD_PRELOAD="$PWD/build/lib/libtandem.so" TANDEM_ROLE=training TANDEM_STATS_FILE="$out/$name-train-stats.json" \
    "${train[@]}" >"$out/$name-train.json" 2>"$out/$name-train.err" & a=$!
  sleep 1  # training starts first and fills what it may
  env "$@" LD_PRELOAD="$PWD/build/lib/libtandem.so" TANDEM_ROLE=inference TANDEM_STATS_FILE="$out/$name-infer-stats.json" \
    "${infer[@]}" >"$out/$name-infer.json" 2>"$out/$name-infer.err" & b=$!
  wait $b
  build/bin/tandemctl status --json >"$out/$name-status.json" || echo "demo memory: no status from tandemd"
  wait $a
  kill $daemon; wait $daemon 2>/dev/null || true
  trap - EXIT
}
echo "demo memory: 3/4 static 50/50 split (512 MiB each)"
shared static TANDEM_MEM_LIMIT=512M
echo "demo memory: 4/4 tandem's pool (1 GiB shared)"
shared pool TANDEM_MEM_LIMIT=1G TANDEM_MEM_POOL=1
"$py" scripts/demo_memory_report.py "$out"
