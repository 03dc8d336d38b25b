#!/usr/bin/env bash
# The Zico scenario (docs/zico.md): two training jobs (train-sim --activations-mb: 32 MiB of
# weights, 120 MiB of activations allocated in the forward pass and freed in the backward pass,
# 152 MiB at the peak) on a GPU of 288 MiB for all its processes: their peaks together do not
# fit. Three configurations: one after the other (each alone), both at once with tandem's pool
# but without Zico, and both with TANDEM_ZICO=1 (tandemd delays iteration starts so that one
# job's peak meets the other's backward pass). Prints each job's iterations/s, out-of-memory
# failures, and the pair's throughput against running them one after the other.
# Simulated GPU only: it sizes the GPU's memory (SIMGPU_MEM_SHARED, SIMGPU_MEM_BYTES).
# Called by scripts/demo.sh; usage: demo_zico.sh OUT_DIR SECONDS
set -euo pipefail
cd "$(dirname "$0")/.."
out=$1
seconds=$2
mkdir -p "$out"
if nvidia-smi -L >/dev/null 2>&1; then
  echo "demo zico: skipped on a real GPU (the scenario sizes the simulated GPU's memory to make the peaks collide)"
  exit 0
fi
export SIMGPU_MEM_SHARED=1 SIMGPU_MEM_BYTES=$((288 << 20))
job=(build/bin/train-sim --seconds "$seconds" --mem-mb 32 --activations-mb 120 --compute-kernels 8 --kernel-us 2000
     --comm-us 500 --gap-us 2000)

echo "demo zico: 1/3 one after the other"
"${job[@]}" >"$out/alone.json" 2>"$out/alone.err"

# Both jobs under libtandem.so with the pool beside tandemd; $1: the configuration's name, then
# tandemd's settings. The second job starts a second after the first, as jobs arrive.
together() {
  local name=$1
  shift
  export TANDEM_SOCKET="$out/$name.sock"
  env "$@" build/bin/tandemd --foreground --socket "$TANDEM_SOCKET" --log info 2>"$out/$name-tandemd.log" & daemon=$!
  trap 'kill $daemon 2>/dev/null || true' EXIT
  for _ in $(seq 50); do [ -S "$TANDEM_SOCKET" ] && break; sleep 0.1; done
  for k in a b; do
    LD_PRELOAD="$PWD/build/lib/libtandem.so" TANDEM_ROLE=training TANDEM_MEM_POOL=1 \
      "${job[@]}" >"$out/$name-$k.json" 2>"$out/$name-$k.err" &
    eval "job_$k=\$!"
    [ $k = a ] && sleep 1
  done
  sleep "$(awk "BEGIN{print $seconds - 1.5}")"
  build/bin/tandemctl status --json >"$out/$name-status.json" 2>/dev/null || true
  wait "$job_a" || true
  wait "$job_b" || true
  kill $daemon; wait $daemon 2>/dev/null || true
  trap - EXIT
}
echo "demo zico: 2/3 both at once, tandem's pool without Zico"
together pool
echo "demo zico: 3/3 both at once, TANDEM_ZICO=1 (budget 240 MiB)"
together zico TANDEM_ZICO=1 TANDEM_ZICO_BUDGET=240M

py=$(command -v /usr/bin/python3 || command -v python3)
"$py" - "$out" <<'PY'
import json, os, sys
out = sys.argv[1]
def last(name):
    lines = [l for l in open(os.path.join(out, name)).read().splitlines() if l.startswith("{")]
    return json.loads(lines[-1]) if lines else {}
alone = last("alone.json")["iters_per_s"]
print()
print("Zico scenario: two training jobs of 152 MiB peaks (32 MiB weights, 120 MiB activations) on a GPU of 288 MiB")
print(f"{'configuration':<34}{'job A it/s':>11}{'job B it/s':>11}{'pair it/s':>10}{'x one after other':>19}  out of memory")
print(f"{'one after the other':<34}{alone:>11.1f}{alone:>11.1f}{alone:>10.1f}{1.0:>19.2f}  -")
for name, label in (("pool", "both at once, pool without Zico"), ("zico", "both at once, TANDEM_ZICO=1")):
    jobs = [last(f"{name}-{k}.json") for k in "ab"]
    failed = [k for k, j in zip("AB", jobs) if j.get("error")]
    # A job that ran out of memory did not finish: its throughput counts as nothing.
    rates = [0.0 if j.get("error") else j.get("iters_per_s", 0.0) for j in jobs]
    print(f"{label:<34}{rates[0]:>11.1f}{rates[1]:>11.1f}{sum(rates):>10.1f}{sum(rates) / alone:>19.2f}  "
          f"{', '.join('job ' + k for k in failed) or 'none'}")
try:
    zico = json.load(open(os.path.join(out, "zico-status.json")))["gpus"][0]["zico"]
    for j in zico["jobs"]:
        print(f"tandemd, pid {j['pid']}: trough {j['trough_bytes'] >> 20} MiB, peak {j['peak_bytes'] >> 20} MiB, "
              f"period {j['period_ms']:.0f} ms, {j['starts']} starts allowed, {j['delayed_starts']} after a wait")
except (OSError, ValueError, KeyError, IndexError, TypeError):
    print("tandemd's Zico state was not recorded")
print("(one after the other: each job alone, so the pair makes one job's progress at a time)")
PY
