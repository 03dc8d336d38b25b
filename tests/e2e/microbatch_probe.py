#!/usr/bin/env python3
"""A training process for microbatch_e2e.py: examples/pytorch/tandem_microbatch.py's
MicrobatchRunner on a small model whose arithmetic runs on the CPU (the simulated GPU does not
execute kernels, so values computed there would be meaningless) and whose activations are held
in GPU memory: each `Hold` layer allocates `--mib-per-sample` MiB per sample of its input on the
GPU in the forward and keeps it in the autograd graph until the backward (through the caching
allocator, so under libtandem it counts against the process's quota as real activations would).
After the run it trains the same model (same seed, same data) without the runner, one
full-batch step at a time, and compares the parameters.

Prints JSON lines: {"event": "ready"}; {"event": "forward", "step": S} when it pauses in the
first forward of a step named in --pause-at (it waits there, at most 20 s, until the runner has a
pressure request pending: the harness lowers the quota meanwhile), {"event": "backward", ...}
the same in the first backward of a step in --pause-in-backward; {"event": "step", ...} after
each step; {"event": "sync", "step": S} after a step named in --sync-after (it then reads a line
from stdin before going on); {"event": "result", ...} last.

usage: microbatch_probe.py REPO_ROOT [--steps N] [--batch B] [--k K] [--mib-per-sample M]
                           [--pause-at S,S] [--pause-in-backward S,S] [--sync-after S,S]
                           [--no-gpu] [--ks K,K] [--backward-mib-per-sample M]
  --backward-mib-per-sample M  the second Hold also takes M MiB per sample for a moment in its
             backward: a step's peak the forward does not show
  --ks K,K   no training run of its own: one run per k (without pressure) against the reference
  Data parallel when RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT are set (gloo, CPU tensors);
  --batch is then each rank's share of the global batch.
"""
import argparse
import hashlib
import json
import os
import sys
import time

import torch

IN, HIDDEN, OUT = 16, 32, 4


def emit(**kv):
    print(json.dumps(kv), flush=True)


class _HoldFn(torch.autograd.Function):
    """Identity; keeps a GPU buffer alive from the forward to the backward (an activation), and
    takes `backward_nbytes` more for a moment in the backward (a temporary the forward never
    shows, as a GPU's backward kernels take workspaces)."""

    @staticmethod
    def forward(ctx, x, nbytes, backward_nbytes):
        ctx.buf = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
        ctx.backward_nbytes = backward_nbytes
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        if ctx.backward_nbytes:
            temporary = torch.empty(ctx.backward_nbytes, dtype=torch.uint8, device="cuda")
            del temporary
        del ctx.buf
        return grad, None, None


class Hold(torch.nn.Module):
    def __init__(self, bytes_per_sample, backward_bytes_per_sample=0):
        super().__init__()
        self.bytes_per_sample, self.backward_bytes_per_sample = bytes_per_sample, backward_bytes_per_sample

    def forward(self, x):
        if not self.bytes_per_sample:
            return x
        return _HoldFn.apply(x, x.shape[0] * self.bytes_per_sample, x.shape[0] * self.backward_bytes_per_sample)


class Pause(torch.nn.Module):
    """In the first micro-batch of a step in `steps` (forward) or `backward_steps` (backward,
    after the last layer's gradients): says so and waits for the runner's pressure."""

    def __init__(self, steps, backward_steps):
        super().__init__()
        self.steps, self.backward_steps = set(steps), set(backward_steps)
        self.step, self.runner, self.paused = 0, None, set()

    def wait(self, where):
        self.paused.add(self.step)
        emit(event=where, step=self.step, k=self.runner.k)
        deadline = time.monotonic() + 20
        while not self.runner.pressure_pending and time.monotonic() < deadline:
            time.sleep(0.001)
        emit(event="pressure_seen", step=self.step, where=where, pending=self.runner.pressure_pending)

    def forward(self, x):
        if self.runner is None or self.step in self.paused:
            return x
        if self.step in self.steps:
            self.wait("forward")
        elif self.step in self.backward_steps:
            return _PauseFn.apply(x, self)
        return x


class _PauseFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, pause):
        ctx.pause = pause
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        ctx.pause.wait("backward")
        return grad, None


def build_model(seed, bytes_per_sample, pause=None, backward_bytes_per_sample=0):
    torch.manual_seed(seed)
    # One Pause module at two places: it waits once a step, at the first place the step reaches
    # in the forward (the first Hold's activations are held then), or the first in the backward
    # (the last layer's gradients have been computed then; the next layer's are not).
    pause = [pause] if pause is not None else []
    return torch.nn.Sequential(torch.nn.Linear(IN, HIDDEN), torch.nn.Tanh(), Hold(bytes_per_sample), *pause,
                               torch.nn.Linear(HIDDEN, HIDDEN), torch.nn.Tanh(),
                               Hold(bytes_per_sample, backward_bytes_per_sample), *pause,
                               torch.nn.Linear(HIDDEN, OUT))


def optimizer_for(model):
    return torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)


def data(steps, batch, seed=1234):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(steps, batch, IN, generator=g), torch.randn(steps, batch, OUT, generator=g)


def reference(steps, xs, ys):
    """The same training without the runner: one full-batch step at a time, on the CPU."""
    model = build_model(0, 0)
    opt = optimizer_for(model)
    for s in range(steps):
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(xs[s]), ys[s]).backward()
        opt.step()
    return model


def compare(model, ref):
    """The largest difference of a parameter tensor relative to its largest magnitude."""
    return max(((a.detach() - b.detach()).abs().max() / b.detach().abs().max().clamp_min(1e-30)).item()
               for a, b in zip(model.parameters(), ref.parameters()))


def digest(model):
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(bytes(p.detach().contiguous().view(-1).view(torch.uint8).tolist()))
    return h.hexdigest()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("root")
    ap.add_argument("--steps", type=int, default=14)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--k", type=int, default=2)
    ap.add_argument("--mib-per-sample", type=float, default=12)
    ap.add_argument("--backward-mib-per-sample", type=float, default=0)
    ap.add_argument("--pause-at", default="")
    ap.add_argument("--pause-in-backward", default="")
    ap.add_argument("--sync-after", default="")
    ap.add_argument("--no-gpu", action="store_true")
    ap.add_argument("--ks", default="")
    a = ap.parse_args()
    sys.path.insert(0, os.path.join(a.root, "examples", "pytorch"))
    from tandem_microbatch import MicrobatchRunner

    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    if world > 1:
        torch.distributed.init_process_group("gloo", rank=rank, world_size=world)
    nbytes = 0 if a.no_gpu else int(a.mib_per_sample * (1 << 20))
    if nbytes:
        warm = torch.ones(1, device="cuda")  # a kernel launch: tandem registers with tandemd after one
        torch.cuda.synchronize()
        del warm
    xs, ys = data(a.steps, a.batch * world)
    mine = slice(rank * a.batch, (rank + 1) * a.batch)
    ref = reference(a.steps, xs, ys)

    if a.ks:
        results = {}
        for k in (int(x) for x in a.ks.split(",")):
            model = build_model(0, nbytes)
            with MicrobatchRunner(model, optimizer_for(model), torch.nn.functional.mse_loss, micro_batches=k) as r:
                for s in range(a.steps):
                    r.step(xs[s][mine], ys[s][mine])
                results[k] = dict(diff=compare(model, ref), micro_batches=r.stats["micro_batches"], tandem=r.tandem)
        emit(event="result", runs=results)
        return

    pause = Pause((int(x) for x in a.pause_at.split(",") if x), (int(x) for x in a.pause_in_backward.split(",") if x))
    sync_after = {int(x) for x in a.sync_after.split(",") if x}
    model = build_model(0, nbytes, pause, int(a.backward_mib_per_sample * (1 << 20)))
    if world > 1:  # as DistributedDataParallel does: every rank starts from rank 0's parameters
        for p in model.parameters():
            torch.distributed.broadcast(p.data, 0)
    runner = MicrobatchRunner(model, optimizer_for(model), torch.nn.functional.mse_loss, micro_batches=a.k)
    pause.runner = runner
    emit(event="ready", pid=os.getpid(), rank=rank, tandem=runner.tandem)
    ks, losses = [], []
    t0 = time.monotonic()
    for s in range(a.steps):
        pause.step = s
        before = runner.stats["micro_batches"]
        loss = runner.step(xs[s][mine], ys[s][mine])
        ks.append(runner.step_k)
        losses.append(float(loss))
        emit(event="step", step=s, k=runner.step_k, k_after=runner.k,
             micro_batches=runner.stats["micro_batches"] - before,
             reserved=torch.cuda.memory_reserved() if nbytes else 0)
        if s in sync_after:
            emit(event="sync", step=s)
            sys.stdin.readline()
    seconds = time.monotonic() - t0
    registered = runner.tandem
    runner.close()
    emit(event="result", pid=os.getpid(), rank=rank, diff=compare(model, ref), digest=digest(model),
         stats=dict(runner.stats),
         events=list(runner.events), ks=ks, losses=losses, seconds=seconds, tandem=registered,
         closed=not runner.tandem)
    if world > 1:
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
