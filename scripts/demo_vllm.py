#!/usr/bin/env python3
"""The demo's scenarios with vLLM (scripts/demo.sh --workload vllm; docs/llm-serving.md), on the
real GPU or the simulated one (whichever demo.sh chose), vLLM from .venv-vllm/.

usage: demo_vllm.py BUILD_DIR OUT_DIR SECONDS slo|fill|all

slo (HARLI's setting): vLLM serving online requests (examples/vllm/llm_workload.py serve,
  Poisson arrivals, TANDEM_ROLE=inference) beside LoRA-style finetuning
  (examples/pytorch/finetune.py, TANDEM_ROLE=training), tandemd --policy slo. Requests are
  delimited by vLLM's engine steps (each ends with a host synchronization), so tandem's latency
  is the step's, the TPOT, held at TANDEM_SLO_MS. Rows: Exclusive (each alone), Co-Exec (both,
  no tandemd) and tandem, once with time slicing and once under MPS (SIMGPU_SHARING=mps on the
  simulated GPU; on a GPU run the MPS control daemon yourself), where tandem runs twice: the
  duty cycle alone (TANDEM_SLO_PARTITION=off) and with live SM partitions. Columns: TTFT and
  TPOT p50/p99 against Exclusive's, SLO attainment (the requests whose TPOT met the target),
  finetuning throughput against its Exclusive. The TPOT target is
  TANDEM_DEMO_TPOT_SLO_MS (default 25); each engine step gets TANDEM_DEMO_STEP_GPU_MS (default
  0) of GPU work added, a real model's weight reads (llm_workload.py --gpu-ms).
fill: vLLM as a batch filler (llm_workload.py batch: generate of a fixed batch, ignore_eos,
  TANDEM_ROLE=batch-inference) beside finetuning with data-loading pauses (bubbles),
  tandemd --policy fill: training retained and vLLM's tokens per second in the bubbles.

Each program starts once (vLLM's start is tens of seconds) and the configurations follow one
another while they run, switched by pause files and tandemd's presence (without tandemd
libtandem.so fails open: Co-Exec), as scripts/demo_pytorch.py does.
"""
import json
import os
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "e2e"))
sys.path.insert(0, os.path.join(ROOT, "examples", "vllm"))
from e2e_util import Env, preload, wait_for  # noqa: E402
import tiny_model  # noqa: E402
import torch_policy_e2e as harness  # noqa: E402

PYTHON = os.path.join(ROOT, ".venv-vllm", "bin", "python")
SIMULATED = {"VLLM_USE_V2_MODEL_RUNNER": "0"}  # docs/simgpu.md: the V2 runner's bookkeeping runs in kernels
VLLM_ENV = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "HF_HUB_OFFLINE": "1", "VLLM_USE_FLASHINFER_SAMPLER": "0",
            "VLLM_NO_USAGE_STATS": "1"}
FINETUNE = ["--gpu-ms", "20", "--kernel-ms", "0.5", "--warmup-steps", "3"]
STEP_GPU_MS = os.environ.get("TANDEM_DEMO_STEP_GPU_MS", "0")  # a decode step's weight reads (llm_workload --gpu-ms)
TPOT_SLO_MS = int(os.environ.get("TANDEM_DEMO_TPOT_SLO_MS", "25"))  # above Exclusive's p99 TPOT (11-37 ms on a busy 2-core host)


class Program(harness.Program):
    """torch_policy_e2e's program (pause file, JSON lines kept) running a script of this
    repository with .venv-vllm's Python."""

    def __init__(self, env, name, args, role, **settings):  # noqa: super().__init__ would start .venv's Python
        self.pause = os.path.join(env.tmp, f"{name}.pause")
        open(self.pause, "w").close()
        e = dict(env.base, **VLLM_ENV, LD_PRELOAD=preload(env.build), TANDEM_ROLE=role, **settings)
        self.p = env.popen([PYTHON, *args, "--pause-file", self.pause], env=e, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
        self.records, self.summary, self.err = [], None, ""
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._read_err, daemon=True).start()


def start(env, finetune_args, vllm_args, vllm_role, **vllm_settings):
    train = Program(env, "finetune", [os.path.join(ROOT, "examples", "pytorch", "finetune.py"), "--seconds", "3600",
                                       "--log-steps", *finetune_args], "training")
    llm = Program(env, "vllm", [os.path.join(ROOT, "examples", "vllm", "llm_workload.py"), *vllm_args,
                                "--seconds", "3600", "--log-requests"], vllm_role, **vllm_settings)
    if not wait_for(lambda: (train.ready() and llm.ready()) or train.p.poll() is not None or llm.p.poll() is not None,
                    900) or not (train.ready() and llm.ready()):
        for p in (train, llm):
            sys.stderr.write(p.err[-3000:])
            p.kill()
        raise SystemExit("demo vllm: a program did not start")
    return train, llm


def window(seconds, settle=1.0):
    t0 = time.time()
    time.sleep(seconds)
    return t0 + settle, time.time()


def with_daemon(env, policy, body, **settings):
    d = env.popen([os.path.join(env.build, "bin", "tandemd"), "--foreground", "--socket", env.socket, "--log", "warn",
                   "--policy", policy], env=dict(env.base, **settings), stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: os.path.exists(env.socket), 5)
        time.sleep(2.0)  # both register; the controller's first periods
        return body()
    finally:
        d.terminate()
        d.wait()


def four_windows(env, train, other, policy, seconds, first, second, tandem_rows=None):
    """train alone, `other` alone, both (Co-Exec: no tandemd), both beside tandemd `policy`:
    each window's (start, end), under the names `first`, `second`, Co-Exec, tandem.
    `tandem_rows` ({name: tandemd's settings}) measures tandem once per entry instead."""
    rows = {}
    try:
        train.run(True)
        rows[first] = window(seconds)
        train.run(False)
        other.run(True)
        rows[second] = window(seconds)
        train.run(True)
        rows["Co-Exec"] = window(seconds)
        for name, settings in (tandem_rows or {"tandem": {}}).items():
            rows[name] = with_daemon(env, policy, lambda: window(seconds), **settings)
    finally:
        train.kill()
        other.kill()
    return rows


def pct(values, q):
    v = sorted(values)
    return v[min(len(v) - 1, int(q * len(v)))] if v else float("nan")


def rate(records, w):
    return len(records) / (w[1] - w[0])


def serving_rows(env, seconds, model, sharing):
    env.base["SIMGPU_SHARING"] = sharing
    serve = ["serve", model, "--rate", "8", "--prompt", "32", "--max-tokens", "32", "--eager", "--gpu-ms", STEP_GPU_MS]
    train, llm = start(env, FINETUNE, serve, "inference", TANDEM_SLO_MS=str(TPOT_SLO_MS))
    # Under MPS tandem twice: the duty cycle alone, and live SM partitions with it (the default).
    tandem_rows = {"tandem": {}} if sharing != "mps" else {
        "tandem, duty cycle": {"TANDEM_SLO_PARTITION": "off"}, "tandem, partitions": {}}
    rows = four_windows(env, train, llm, "slo", seconds, "finetune alone", "Exclusive", tandem_rows)
    ex_train = rate(train.between(*rows["finetune alone"]), rows["finetune alone"])
    ex = llm.between(*rows["Exclusive"])
    ex_ttft = (pct([r["ttft_ms"] for r in ex], .5), pct([r["ttft_ms"] for r in ex], .99))
    ex_tpot = (pct([r["tpot_ms"] for r in ex], .5), pct([r["tpot_ms"] for r in ex], .99))
    result = []
    for name in ("Exclusive", "Co-Exec", *tandem_rows):
        w = rows[name]
        reqs = llm.between(*w)
        ttft = [pct([r["ttft_ms"] for r in reqs], q) for q in (.5, .99)]
        tpot = [pct([r["tpot_ms"] for r in reqs], q) for q in (.5, .99)]
        attained = sum(r["tpot_ms"] <= TPOT_SLO_MS for r in reqs) / max(1, len(reqs))  # SLO attainment
        t = 1.0 if name == "Exclusive" else rate(train.between(*w), w) / ex_train
        result.append((f"{name} ({sharing})", ttft[0] / ex_ttft[0], ttft[1] / ex_ttft[1], tpot[0] / ex_tpot[0],
                       tpot[1] / ex_tpot[1], attained, t, len(reqs)))
    return result, ex_ttft, ex_tpot, ex_train


def slo(env, seconds, out):
    model = os.path.join(out, "tiny-llama")
    tiny_model.write(model)
    print(f"\nserving: vLLM online (Poisson, 8 requests/s, 32 + 32 tokens, {STEP_GPU_MS} ms of GPU work a step) beside "
          f"LoRA finetuning; TANDEM_SLO_MS={TPOT_SLO_MS} on each engine step (the TPOT)")
    print(f"{'configuration':<32}{'TTFT p50':>9}{'p99':>7}{'TPOT p50':>9}{'p99':>7}{'SLO':>6}{'finetune':>10}{'requests':>10}")
    for sharing in ("timeslice", "mps"):
        rows, ex_ttft, ex_tpot, ex_train = serving_rows(env, seconds, model, sharing)
        for name, a, b, c, d, attained, t, n in rows:
            print(f"{name:<32}{a:>9.2f}{b:>7.2f}{c:>9.2f}{d:>7.2f}{attained:>6.2f}{t:>10.3f}{n:>10}")
        print(f"  ({sharing}: latencies divided by Exclusive's TTFT {ex_ttft[0]:.1f}/{ex_ttft[1]:.1f} ms and TPOT "
              f"{ex_tpot[0]:.2f}/{ex_tpot[1]:.2f} ms (p50/p99); SLO: the requests whose TPOT met the target; finetuning "
              f"by its {ex_train:.2f} steps/s alone)")
    env.base.pop("SIMGPU_SHARING", None)


def fill(env, seconds, out):
    model = os.path.join(out, "tiny-llama")
    tiny_model.write(model)
    train_args = ["--gpu-ms", "40", "--kernel-ms", "1", "--warmup-steps", "3", "--sleep-ms", "20"]
    batch = ["batch", model, "--batch", "32", "--prompt", "16", "--max-tokens", "16", "--eager"]
    train, llm = start(env, train_args, batch, "batch-inference")
    rows = four_windows(env, train, llm, "fill", seconds, "Exclusive training", "Exclusive vLLM")
    ex_t = rate(train.between(*rows["Exclusive training"]), rows["Exclusive training"])

    def tokens_per_s(w):
        return sum(r["tokens"] for r in llm.between(*w)) / (w[1] - w[0])

    ex_v = tokens_per_s(rows["Exclusive vLLM"])
    print("\nfiller: vLLM generate (32 prompts x 16 tokens, ignore_eos) beside finetuning with 20 ms pauses "
          "(40 ms of GPU work a step)")
    print(f"{'configuration':<20}{'training':>10}{'vLLM tokens/s':>15}{'of alone':>10}")
    print(f"{'Exclusive':<20}{1.0:>10.3f}{ex_v:>15.0f}{1.0:>10.3f}")
    for name in ("Co-Exec", "tandem"):
        w = rows[name]
        v = tokens_per_s(w)
        print(f"{name:<20}{rate(train.between(*w), w) / ex_t:>10.3f}{v:>15.0f}{v / ex_v:>10.3f}")
    print(f"(training divided by its {ex_t:.2f} steps/s alone)")


def main():
    build, out, seconds, scenario = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
    if not os.path.exists(PYTHON):
        print("demo vllm: no .venv-vllm (scripts/setup-venv.sh --vllm)", file=sys.stderr)
        return 2
    os.makedirs(out, exist_ok=True)
    env = Env(build)
    env.base = dict(os.environ, TANDEM_SOCKET=env.socket)
    if "build/simgpu" in os.environ.get("LD_LIBRARY_PATH", "") or not os.path.exists("/dev/nvidia0"):
        env.base.update(SIMULATED)
    for name, run in (("slo", slo), ("fill", fill)):
        if scenario in (name, "all"):
            print(f"\ndemo vllm: scenario {name} (vLLM and finetuning start first: a minute or more)")
            run(env, seconds, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
