"""SIRIUS's "instant adjustment" for a PyTorch training loop under tandem: each training step
runs as k micro-batches with gradient accumulation, and when tandem asks for memory the step
drops the micro-batch that is running, frees PyTorch's cache, and goes on with more, smaller
micro-batches; it goes back to fewer, larger ones when the memory is there again. The result is
the same as one step on the whole batch (to floating-point rounding): a discarded micro-batch
leaves no trace and its samples are run again.

    from tandem_microbatch import MicrobatchRunner
    runner = MicrobatchRunner(model, optimizer, torch.nn.functional.cross_entropy, micro_batches=2)
    for inputs, targets in loader:
        loss = runner.step(inputs, targets)   # forward/backward over k micro-batches, optimizer.step()

Without libtandem (no LD_PRELOAD) it is a plain gradient accumulator with k fixed.

How it works (docs/memory.md, "Micro-batches that give memory back"):
* tandem calls the memory-pressure callback (include/tandem/client.h) on its progress thread
  while the process holds more than its quota (tandemd lowered it: `tandemctl mem --set`, or
  online inference took the memory). The callback only sets a flag; inside a step the training
  thread acts on it at its next check point: before every module's forward (forward pre-hooks),
  before the backward, and as each parameter's gradient is computed (gradient hooks). Between
  steps (data loading, evaluation) the callback empties the cache itself.
* Gradient phase: the running micro-batch is discarded (its autograd graph and activations are
  dropped, the gradients it computed so far thrown away: each micro-batch's gradients are added
  to separate accumulation buffers only once its backward completed), the cache is emptied
  (torch.cuda.empty_cache()) and the bytes freed reported (tandem_report_release), k doubles (up
  to the batch size) and the rest of the batch, the discarded samples included, runs in
  micro-batches of the new size. A torch.OutOfMemoryError in the gradient phase is handled the
  same way, and so is cuBLAS's or cuDNN's failure to allocate (a RuntimeError). Model-update phase (optimizer.step()): the update finishes, then the cache is
  emptied and the next step runs with twice the micro-batches.
* Regrowing: at the start of a step that follows a step without pressure, k halves (down to the
  `micro_batches` given) when the memory free under the quota (torch.cuda.mem_get_info(), which
  tandem answers with the quota's view) plus PyTorch's cached, unused memory holds the larger
  micro-batch's activations (the most device memory a micro-batch held after its forward, per
  sample, times the larger micro-batch's samples) with a 25 % margin. An out-of-memory raises
  that per-sample figure to what was available over the samples that failed: the forward does
  not show the backward's temporaries, and the runner would otherwise regrow into the same
  failure after every calm step.
* Data parallel (torch.distributed initialized, world size > 1): pass the plain module, not a
  DistributedDataParallel wrapper. The ranks agree on k before every step (the largest k any
  rank wants, one all-reduce), so in steps without pressure every rank runs the same number of
  micro-batches, and the runner all-reduces the accumulated gradients (mean over the ranks) once
  per step, after the last micro-batch. A rank that shrinks inside a step does so on its own:
  there is no collective between micro-batches, so no rank waits for another; the others take
  its k at the next step. Every rank should get batches of the same size.

Requirements and limits: loss_fn(output, target) returns the mean over the micro-batch's samples
(reduction="mean"; pass reduction="sum" for a sum). Exactness holds for models whose output for a
sample does not depend on the other samples of its batch (no BatchNorm in training mode; dropout
is fine but draws other random numbers than an undivided batch would). step() owns the
parameters' .grad (they are None between steps); the accumulation buffers cost one more copy
of the gradients during the step. Not with a GradScaler (mixed-precision loss scaling) or
CUDA-graph captured steps. tandem calls one memory-pressure callback per process: a runner
replaces tandem_torch.install()'s (it empties the cache itself) and close() removes it.
"""
import collections
import math
import threading
import time

import torch

from tandem_torch import PRESSURE_FN, memory_api  # installed beside this file

_OOM = getattr(torch, "OutOfMemoryError", None) or torch.cuda.OutOfMemoryError
# cuBLAS and cuDNN allocate their handles and workspaces themselves; PyTorch reports a failure
# there as a RuntimeError naming the library's status, not as an OutOfMemoryError.
_LIBRARY_OOM = ("CUBLAS_STATUS_ALLOC_FAILED", "CUDNN_STATUS_ALLOC_FAILED")


def _out_of_memory(error):
    return isinstance(error, _OOM) or any(status in str(error) for status in _LIBRARY_OOM)
_REGROW_MARGIN = 1.25
_active = None  # the registered callback: tandem keeps a pointer to it


class _Discard(Exception):
    """Raised at a check point to abandon the running micro-batch."""


def _drain_autograd():
    """After an exception inside a backward run by the calling thread (a graph on the CPU),
    PyTorch's autograd engine keeps the rest of that graph, saved activations included, until the
    next backward on the thread (seen with torch 2.15; a backward run on a GPU's engine thread
    dropped it at once): an empty backward lets it go."""
    torch.ones((), requires_grad=True).backward()


def _split(x, start, end):
    """Samples [start, end) of a batch: a tensor, or a tuple/list/dict of them (dim 0)."""
    if isinstance(x, torch.Tensor):
        return x[start:end]
    if isinstance(x, dict):
        return {key: _split(v, start, end) for key, v in x.items()}
    if isinstance(x, (tuple, list)):
        return type(x)(_split(v, start, end) for v in x)
    return x


def _batch_size(x):
    if isinstance(x, torch.Tensor):
        return x.shape[0]
    values = x.values() if isinstance(x, dict) else x
    for v in values:
        n = _batch_size(v) if isinstance(v, (torch.Tensor, tuple, list, dict)) else None
        if n is not None:
            return n
    return None


class MicrobatchRunner:
    """Runs training steps as micro-batches that shrink under tandem's memory pressure.

    model, optimizer: the module (not a DistributedDataParallel wrapper) and its optimizer.
    loss_fn(output, target): the loss of a micro-batch, a mean over its samples (or a sum with
        reduction="sum").
    micro_batches: k without pressure, the least k the runner regrows to.
    max_micro_batches: the largest k (default and at most: the batch size, one sample each).
    process_group: the data-parallel group (default: the world, when torch.distributed is
        initialized).

    Attributes: k (micro-batches of the next step); step_k (those the last step started with, after
    the ranks agreed); tandem (True when tandem's callback is registered); stats (a Counter: steps,
    micro_batches (run to the end), discarded, discarded_samples, pressure (tandem's requests),
    shrinks, regrows, followed (k raised to another rank's), released_bytes, ooms (handled)); events
    (the last 256 adjustments, dicts: step, phase (where the request was met: "forward", "backward",
    "between" micro-batches, "update", "idle" between steps, or "oom"), discarded, k after it, freed
    bytes, pressure_ns (tandem's call) and released_ns on CLOCK_MONOTONIC (time.monotonic_ns()),
    quota and in_use as tandem gave them).
    """

    def __init__(self, model, optimizer, loss_fn, micro_batches=1, max_micro_batches=None, process_group=None,
                 reduction="mean"):
        if isinstance(model, torch.nn.parallel.DistributedDataParallel):
            raise ValueError("MicrobatchRunner: pass the plain module; the runner all-reduces the gradients itself")
        if micro_batches < 1 or reduction not in ("mean", "sum"):
            raise ValueError("MicrobatchRunner: micro_batches >= 1, reduction 'mean' or 'sum'")
        self.model, self.optimizer, self.loss_fn = model, optimizer, loss_fn
        self.base_k = self.k = self.step_k = int(micro_batches)
        self.max_k = max_micro_batches
        self.reduction = reduction
        self.group = process_group
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.stats = collections.Counter(steps=0, micro_batches=0, discarded=0, discarded_samples=0, pressure=0,
                                         shrinks=0, regrows=0, followed=0, released_bytes=0, ooms=0)
        self.events = collections.deque(maxlen=256)
        self._cap = max_micro_batches or (1 << 30)  # the largest k for the batch at hand
        self._phase = None           # "forward"/"backward" while a micro-batch runs, "update", None
        self._in_step = False
        self._pressure = False       # set by tandem's callback, cleared once acted on
        self._pressure_ns = 0
        self._pressure_args = (0, 0)
        self._pressure_in_step = False
        self._calm = True            # the last step saw no pressure: regrowing is allowed
        # Device memory per sample: the most a micro-batch held after its forward, or more where an
        # out-of-memory showed it (_relieve)
        self._bytes_per_sample = 0
        self._free_lock = threading.Lock()
        self._hooks = [m.register_forward_pre_hook(self._forward_check) for m in model.modules()]
        self._hooks += [p.register_hook(self._backward_check) for p in self.params]
        self._report = self._callback = self._register = None
        api = memory_api()
        if api:
            register, report = api
            callback = PRESSURE_FN(self._on_pressure)
            if register(callback, None) == 0:
                global _active
                _active = callback  # alive as long as tandem may call it
                self._callback, self._register, self._report = callback, register, report
        self.tandem = self._callback is not None

    @property
    def pressure_pending(self):
        """True from tandem's request for memory until the runner has acted on it."""
        return self._pressure

    # --- tandem's progress thread ---

    def _on_pressure(self, quota_bytes, in_use_bytes, _user):
        try:
            if not self._pressure:
                self._pressure_ns = time.monotonic_ns()
                self._pressure_args = (int(quota_bytes), int(in_use_bytes))
                self._pressure = True
                self.stats["pressure"] += 1
            if not self._in_step:
                # Nothing runs that a check point would stop: free now; the flag stays set, so the
                # next step starts with smaller micro-batches.
                freed = self._free(wait=False)
                if freed is not None:
                    self._record("idle", 0, freed)
        except Exception as e:  # never let an exception cross into tandem's thread
            print(f"tandem_microbatch: pressure callback failed: {e}")

    # --- check points (training thread) ---

    def _forward_check(self, _module, _inputs):
        if self._phase == "forward" and self._pressure and self.k < self._cap:
            raise _Discard()

    def _backward_check(self, _grad):
        if self._phase == "backward" and self._pressure and self.k < self._cap:
            raise _Discard()

    # --- a step ---

    def step(self, inputs, targets):
        """One training step on the batch (inputs, targets): tensors, or tuples/lists/dicts of
        them, split along dim 0. Returns the batch's loss (0-dim, detached: loss_fn's value for
        the whole batch). The gradients applied are the whole batch's; under data parallelism
        their mean over the ranks."""
        n = _batch_size(inputs)
        if not n:
            raise ValueError("MicrobatchRunner.step: no tensor with a batch dimension in inputs")
        self._cap = min(self.max_k or n, n)
        self._in_step = True
        self._pressure_in_step = False
        try:
            before = self.k
            self.k = max(1, min(self._agree(self._wanted_k()), self._cap))
            if self.k < before:
                self.stats["regrows"] += 1
            self.step_k = self.k
            acc = [None] * len(self.params)
            loss_total = None
            done = 0             # samples accumulated
            split = None         # (k, first sample, pieces, pieces done) of the current split
            for p in self.params:
                p.grad = None
            while done < n:
                if self._pressure:
                    self._relieve("between", 0)
                if split is None or split[0] != self.k:
                    # The rest of the batch in as many pieces as k gives it (k pieces in a step
                    # without pressure), their sizes differing by one at most.
                    split = [self.k, done, max(1, math.ceil((n - done) * self.k / n)), 0]
                _, first, pieces, j = split
                end = first + (n - first) * (j + 1) // pieces
                outcome = self._micro(_split(inputs, done, end), _split(targets, done, end), end - done, n)
                if isinstance(outcome, str):  # discarded: nothing of it stays
                    if outcome != "forward":
                        _drain_autograd()
                    for p in self.params:
                        p.grad = None
                    self._relieve(outcome, end - done)
                    continue
                for i, p in enumerate(self.params):
                    if p.grad is not None:
                        acc[i] = p.grad if acc[i] is None else acc[i].add_(p.grad)
                        p.grad = None
                loss_total = outcome if loss_total is None else loss_total + outcome
                done = end
                split[3] += 1
                self.stats["micro_batches"] += 1
            self._phase = "update"
            self._all_reduce(acc)
            for p, g in zip(self.params, acc):
                p.grad = g
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
        finally:
            self._phase = None
            self._in_step = False
        if self._pressure:
            self._relieve("update", 0)
        self._calm = not self._pressure_in_step
        self.stats["steps"] += 1
        return loss_total

    def _micro(self, inputs, targets, samples, n):
        """Forward and backward of one micro-batch: its weighted loss (detached), or the phase
        ("forward", "backward", "oom") in which it was given up."""
        phase = self._phase = "forward"
        cuda = torch.cuda.is_initialized()
        before = torch.cuda.memory_allocated() if cuda else 0
        try:
            loss = self.loss_fn(self.model(inputs), targets)
            if self._pressure and self.k < self._cap:
                raise _Discard()
            if cuda or torch.cuda.is_initialized():
                held = torch.cuda.memory_allocated() - before
                self._bytes_per_sample = max(self._bytes_per_sample, held // samples)
            weighted = loss * (samples / n) if self.reduction == "mean" else loss
            phase = self._phase = "backward"
            weighted.backward()
            return weighted.detach()
        except _Discard:
            pass
        except RuntimeError as error:
            if not _out_of_memory(error) or self.k >= self._cap:
                raise  # not memory, or nothing smaller to run
            self.stats["ooms"] += 1
            phase = "oom"
        finally:
            self._phase = None
        # Returning drops the exception's frames, and with them the graph and the activations.
        return phase

    def _relieve(self, phase, discarded):
        """Frees the cache, reports it, and doubles k: tandem asked for memory (or an allocation
        failed)."""
        if phase == "oom":
            self._pressure_ns, self._pressure_args = time.monotonic_ns(), (0, 0)
        freed = self._free(wait=True)
        if phase == "oom" and discarded:
            # What a sample needs, learned from the failure: all the memory there was did not
            # hold `discarded` samples. The forward's figure misses the backward's temporaries
            # (cuBLAS's and cuDNN's workspaces on a GPU); without this the runner regrew into
            # the same failure after every calm step (an H200: 278 times in 560 steps).
            self._bytes_per_sample = max(self._bytes_per_sample, math.ceil(self._available() / discarded))
        if discarded:
            self.stats["discarded"] += 1
            self.stats["discarded_samples"] += discarded
        if self.k < self._cap:
            self.k = min(2 * self.k, self._cap)
            self.stats["shrinks"] += 1
        self._pressure_in_step = True
        self._record(phase, discarded, freed)
        self._pressure = False  # cleared after the release: a call during it was the same request

    def _record(self, phase, discarded, freed):
        self.events.append(dict(step=self.stats["steps"], phase=phase, discarded=bool(discarded), k=self.k,
                                freed=freed, pressure_ns=self._pressure_ns, released_ns=time.monotonic_ns(),
                                quota=self._pressure_args[0], in_use=self._pressure_args[1]))

    def _free(self, wait):
        """Empties PyTorch's CUDA cache and reports the bytes it gave back; None when another
        thread is freeing and `wait` is False."""
        if not torch.cuda.is_initialized():
            return 0
        if not self._free_lock.acquire(blocking=wait):
            return None
        try:
            before = torch.cuda.memory_reserved()
            torch.cuda.empty_cache()
            freed = max(0, before - torch.cuda.memory_reserved())
        finally:
            self._free_lock.release()
        if freed and self._report:
            self._report(freed)
        self.stats["released_bytes"] += freed
        return freed

    def _available(self):
        """Device memory this process could still use: free, plus what PyTorch caches unused."""
        if not torch.cuda.is_initialized():
            return 0
        free, _total = torch.cuda.mem_get_info()
        return free + torch.cuda.memory_reserved() - torch.cuda.memory_allocated()

    def _wanted_k(self):
        """This rank's k for the next step: the current one, or half of it when the memory is
        there again."""
        if self._pressure or not self._calm or self.k <= self.base_k or not self._bytes_per_sample \
                or not torch.cuda.is_initialized():
            return self.k
        half = max(self.base_k, self.k // 2)
        need = self._bytes_per_sample * math.ceil(self._cap / half) * _REGROW_MARGIN
        return half if self._available() >= need else self.k

    # --- data parallel ---

    def _distributed(self):
        dist = torch.distributed
        return dist.is_available() and dist.is_initialized() and dist.get_world_size(self.group) > 1

    def _collective_device(self):
        if torch.distributed.get_backend(self.group) == "nccl":
            return torch.device("cuda", torch.cuda.current_device())
        return torch.device("cpu")

    def _agree(self, k):
        """The largest k any rank wants, so that every rank runs as many micro-batches."""
        if not self._distributed():
            return k
        t = torch.tensor([k], dtype=torch.int64, device=self._collective_device())
        torch.distributed.all_reduce(t, op=torch.distributed.ReduceOp.MAX, group=self.group)
        agreed = int(t.item())
        if agreed > self.k:
            self.stats["followed"] += 1
        return agreed

    def _all_reduce(self, acc):
        """The accumulated gradients' mean over the ranks: one all-reduce per device and dtype."""
        if not self._distributed():
            return
        for i, p in enumerate(self.params):
            if acc[i] is None:  # every rank sends the same tensors
                acc[i] = torch.zeros_like(p)
        world = torch.distributed.get_world_size(self.group)
        groups = collections.defaultdict(list)
        for i, g in enumerate(acc):
            groups[(g.device, g.dtype)].append(i)
        for idx in groups.values():
            flat = torch.cat([acc[i].reshape(-1) for i in idx])
            torch.distributed.all_reduce(flat, group=self.group)
            flat.div_(world)
            offset = 0
            for i in idx:
                acc[i].copy_(flat[offset:offset + acc[i].numel()].view_as(acc[i]))
                offset += acc[i].numel()

    # --- the end ---

    def close(self):
        """Removes the hooks and tandem's callback (if it is still this runner's)."""
        global _active
        for h in self._hooks:
            h.remove()
        self._hooks = []
        if self._callback is not None:
            if _active is self._callback:
                self._register(PRESSURE_FN(), None)  # NULL: no callback
                _active = None
            self._callback = None
            self.tandem = False

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
