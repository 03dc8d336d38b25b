#!/usr/bin/env bash
# The main job, two scenarios on one GPU. Runs on the real GPU when nvidia-smi finds one,
# otherwise on the simulated GPU.   Usage: scripts/demo.sh [--seconds S] [--scenario fill|slo|memory|zico|all]
# fill (training first): training with communication and data-loading bubbles (train-sim)
#   shares the GPU with batch inference (infer-sim). Four configurations, each for --seconds S
#   (default 5): Exclusive training, Exclusive inference, Co-Exec (both, no tandem), tandem
#   (both under libtandem.so with tandemd's fill policy). Prints normalized throughputs,
#   inference p95 and bubble utilization; writes a Perfetto trace and a PNG timeline.
# slo (inference first): online inference with Poisson arrivals and a burst beside training,
#   tandemd --policy slo, for 2 x S seconds (scripts/demo_slo.sh): latency table and plot.
# memory: elastic training beside online inference whose models come and go, in 1 GiB, for
#   3 x S seconds (scripts/demo_memory.sh): tandem's pool against a static 50/50 split.
# zico: two training jobs whose memory peaks together exceed the (simulated) GPU, S seconds
#   each way (scripts/demo_zico.sh): one after the other, together without Zico (out of
#   memory), together with TANDEM_ZICO=1.
# --workload pytorch: the same scenarios with real PyTorch programs (examples/pytorch/train.py
#   and serve.py, from the project's venv) instead of train-sim and infer-sim
#   (scripts/demo_pytorch.py); its memory scenario runs train.py beside model_server.py on
#   SIRIUS's four traces, six configurations each for 4 x S seconds, about 20 minutes
#   (scripts/demo_memory_pytorch.py).
# --workload vllm: vLLM (from .venv-vllm/) serving online requests beside LoRA-style finetuning
#   under policy slo, time slicing and MPS (scenario slo), and as a batch filler beside
#   finetuning under policy fill (scenario fill) (scripts/demo_vllm.py, docs/llm-serving.md).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=5
scenario=all
workload=sim
usage="usage: scripts/demo.sh [--seconds S] [--scenario fill|slo|memory|zico|all] [--workload sim|pytorch|vllm]"
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds=${2:?--seconds needs a value}; shift 2 ;;
    --scenario) scenario=${2:?--scenario needs fill, slo, memory, zico or all}; shift 2 ;;
    --workload) workload=${2:?--workload needs sim, pytorch or vllm}; shift 2 ;;
    *) echo "$usage" >&2; exit 2 ;;
  esac
done
case "$scenario" in fill|slo|memory|zico|all) ;; *) echo "demo: unknown scenario '$scenario' (fill, slo, memory, zico or all)" >&2; exit 2 ;; esac
case "$workload" in sim|pytorch|vllm) ;; *) echo "demo: unknown workload '$workload' (sim, pytorch or vllm)" >&2; exit 2 ;; esac
scripts/setup.sh --quiet
if [ "$workload" = pytorch ]; then scripts/setup-venv.sh >/dev/null; fi
if [ "$workload" = vllm ]; then scripts/setup-venv.sh --vllm >/dev/null; fi

if nvidia-smi -L >/dev/null 2>&1; then
  echo "demo: real GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
else
  echo "demo: no GPU found, using the simulated GPU (build/simgpu)"
  export LD_LIBRARY_PATH="$PWD/build/simgpu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export SIMGPU_SHM="/simgpu-demo-$$"
  # The simulated GPUs of earlier demos whose shell is gone (a demo ends in exec, without a trap).
  for segment in /dev/shm/simgpu-demo-*; do
    [ -e "$segment" ] || continue
    pid=${segment#/dev/shm/simgpu-demo-}
    [ -d "/proc/${pid%%-*}" ] || rm -f "$segment"
  done
fi
out=${TANDEM_DEMO_OUT:-$(mktemp -d /tmp/tandem-demo.XXXXXX)}
mkdir -p "$out"
if [ "$workload" = pytorch ]; then exec .venv/bin/python scripts/demo_pytorch.py build "$out" "$seconds" "$scenario"; fi
if [ "$workload" = vllm ]; then
  case "$scenario" in slo|fill|all) ;; *) echo "demo: --workload vllm has the scenarios slo and fill" >&2; exit 2 ;; esac
  exec .venv-vllm/bin/python scripts/demo_vllm.py build "$out" "$seconds" "$scenario"
fi
if [ "$scenario" = slo ]; then exec scripts/demo_slo.sh "$out/slo" "$(awk "BEGIN{print $seconds * 2}")"; fi
if [ "$scenario" = memory ]; then exec scripts/demo_memory.sh "$out/memory" "$(awk "BEGIN{print $seconds * 3}")"; fi
if [ "$scenario" = zico ]; then exec scripts/demo_zico.sh "$out/zico" "$seconds"; fi
train() { build/bin/train-sim --seconds "$seconds"; }
infer() { build/bin/infer-sim --seconds "$seconds"; }

echo "demo: 1/4 exclusive training";  train >"$out/exclusive-train.json"
echo "demo: 2/4 exclusive inference"; infer >"$out/exclusive-infer.json"
echo "demo: 3/4 co-exec (no tandem)"
train >"$out/coexec-train.json" & a=$!
infer >"$out/coexec-infer.json" & b=$!
wait $a $b

echo "demo: 4/4 tandem (fill policy)"
export TANDEM_SOCKET="$out/tandemd.sock"
build/bin/tandemd --foreground --socket "$TANDEM_SOCKET" --log warn 2>"$out/tandemd.log" & daemon=$!
trap 'kill $daemon 2>/dev/null || true' EXIT
for _ in $(seq 50); do [ -S "$TANDEM_SOCKET" ] && break; sleep 0.1; done
export TANDEM_STATS_FILE="$out/stats-%p.json"
LD_PRELOAD="$PWD/build/lib/libtandem.so" TANDEM_ROLE=training train >"$out/tandem-train.json" & a=$!
LD_PRELOAD="$PWD/build/lib/libtandem.so" TANDEM_ROLE=batch-inference infer >"$out/tandem-infer.json" & b=$!
sleep 1
build/bin/tandemctl trace --seconds 1 --out "$out/trace.json" >/dev/null || echo "demo: no trace recorded"
build/bin/tandemctl status >"$out/status.txt" || true
wait $a $b
kill $daemon; wait $daemon 2>/dev/null || true
trap - EXIT
# The report wants matplotlib from Debian (python3-matplotlib): prefer the system interpreter.
py=$(command -v /usr/bin/python3 || command -v python3)
"$py" scripts/demo_report.py "$out"

# What libtandem.so saw in each process of the tandem run (TANDEM_STATS_FILE, docs/stats.md),
# beside what the examples measured themselves.
"$py" - "$out" <<'PY'
import glob, json, sys
out = sys.argv[1]
def last_json(path):
    try:
        lines = [l for l in open(path).read().splitlines() if l.startswith("{")]
        return json.loads(lines[-1]) if lines else {}
    except OSError:
        return {}
stats = []
for path in sorted(glob.glob(f"{out}/stats-*.json")):
    try:
        stats.append(json.load(open(path)))
    except (OSError, ValueError) as e:
        print(f"demo: unreadable statistics file {path}: {e}")
if not stats:
    print("demo: no tandem statistics were written (is build/lib/libtandem.so working?)")
    sys.exit(0)
train, infer = last_json(f"{out}/tandem-train.json"), last_json(f"{out}/tandem-infer.json")
own = {
    "training": ("train-sim", f"{train['iters_per_s']:.2f} it/s" if train else "no summary"),
    "batch-inference": ("infer-sim", f"{infer['throughput_rps']:.1f} req/s, p95 {infer['p95_ms']:.2f} ms"
                        if infer else "no summary"),
}
print()
print("what tandem saw in the tandem run (one line per process):")
print(f"{'process':<18}{'role':<17}{'kernels':>8}{'nccl':>6}{'graphs':>7}{'allocs':>7}{'peak MiB':>9}"
      f"{'held s':>8}  {'top entry points':<26}own measure")
for s in sorted(stats, key=lambda s: s.get("role", "")):
    l, m = s["launches"], s["memory"]
    name, measured = own.get(s["role"], ("?", ""))
    top = sorted(l["by_entry"].items(), key=lambda kv: -kv[1])[:2]
    entries = ", ".join(f"{k}={v}" for k, v in top) or "-"
    held = s.get("gate", {}).get("wait_ns")
    held = "-" if held is None else f"{held / 1e9:.2f}"
    print(f"{name + ' ' + str(s['pid']):<18}{s['role']:<17}{l['total']:>8}{l['nccl']:>6}"
          f"{l['graph_launches']:>7}{m['allocs']:>7}{m['peak_bytes'] / 2**20:>9.1f}{held:>8}  {entries:<26}{measured}")
print("(held s: time the process's launches waited at tandem's gate for tokens)")
PY

if [ "$scenario" = all ]; then
  echo
  scripts/demo_slo.sh "$out/slo" "$(awk "BEGIN{print $seconds * 2}")"
  echo
  scripts/demo_memory.sh "$out/memory" "$(awk "BEGIN{print $seconds * 3}")"
  echo
  scripts/demo_zico.sh "$out/zico" "$seconds"
fi
