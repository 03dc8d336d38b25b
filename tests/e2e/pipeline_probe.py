"""One rank of a torch.distributed.pipelining run on the simulated GPUs (run by pipeline_e2e.py).

A small MLP split into WORLD_SIZE stages (one process and one simulated GPU each, NCCL),
trained for STEPS steps with SCHEDULE (GPipe or 1F1B, 4 microbatches); the stages' shapes are
given (PipelineStage's inference unpickles them through numpy, which the test venv lacks).
Kernels do not compute on the simulator, so what is checked is what moves:
  * a tensor rank 0 sends to rank 1 (dist.send / dist.recv) arrives equal;
  * every activation a stage receives is the one its predecessor sent: each stage's last layer
    overwrites its output with a pattern of (rank, microbatch) by a host copy (real on the
    simulator), and the next stage's forward pre-hook reads its input back;
  * rank 0 sleeps DELAY_MS before each step: the later stages wait for its activations, so
    their steps take at least as long.
Prints one JSON line: rank, steps, seconds (all steps), step_s, activations (checked), bad.

usage: pipeline_probe.py SCHEDULE STEPS DELAY_MS   (env RANK, WORLD_SIZE, MASTER_ADDR/PORT)
"""
import json
import os
import sys
import time

import torch
import torch.distributed as dist
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

DIM, BATCH, MICROBATCHES = 64, 32, 4


def pattern(rank, n, shape):
    """Activation n of stage `rank`, on the host."""
    return torch.full(shape, float(rank * 1000 + n + 1))


def main():
    schedule_name, steps, delay_ms = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    device = torch.device("cuda", rank)
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=device)

    # A plain tensor first: the bytes of a send arrive.
    probe = torch.arange(1024, dtype=torch.float32)
    if rank == 0:
        dist.send(probe.to(device), dst=1)
    elif rank == 1:
        got = torch.zeros(1024, device=device)
        dist.recv(got, src=0)
        assert torch.equal(got.cpu(), probe), "dist.recv got other bytes than dist.send sent"

    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(DIM, DIM), torch.nn.ReLU(), torch.nn.Linear(DIM, DIM)).to(device)
    sent, received, bad = [0], [0], []

    def mark_output(_module, _inputs, output):
        if output.is_meta:  # shape inference
            return
        with torch.no_grad():
            output.copy_(pattern(rank, sent[0] % MICROBATCHES, output.shape))
        sent[0] += 1

    def check_input(_module, inputs):
        if inputs[0].is_meta:
            return
        want = pattern(rank - 1, received[0] % MICROBATCHES, inputs[0].shape)
        if not torch.equal(inputs[0].detach().cpu(), want):
            bad.append(received[0])
        received[0] += 1

    if rank + 1 < world:
        module.register_forward_hook(mark_output)
    if rank > 0:
        module.register_forward_pre_hook(check_input)
    # Shapes by hand: PipelineStage's own inference sends pickled metadata, which
    # recv_object_list unpickles through numpy (not in the test venv).
    shape = (BATCH // MICROBATCHES, DIM)
    # Given shapes say which tensors carry gradients: a later stage's input (sent back) and an
    # earlier stage's output (received back).
    inputs = torch.empty(shape, device=device, requires_grad=rank > 0)
    outputs = torch.empty(shape, device=device, requires_grad=rank + 1 < world)
    stage = PipelineStage(module, rank, world, device, input_args=(inputs,), output_args=outputs)

    def loss_fn(output, target):
        return ((output - target) ** 2).mean()

    cls = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B}[schedule_name]
    schedule = cls(stage, n_microbatches=MICROBATCHES, loss_fn=loss_fn)
    optimizer = torch.optim.SGD(module.parameters(), lr=0.01)
    x = torch.randn(BATCH, DIM, device=device)
    target = torch.randn(BATCH, DIM, device=device)
    step_s = []
    for step in range(steps + 1):  # step 0 warms up (cuBLAS, NCCL's connections)
        if rank == 0 and step > 0:
            time.sleep(delay_ms / 1000)
        t0 = time.perf_counter()
        optimizer.zero_grad()
        if rank == 0:
            schedule.step(x)
        elif rank == world - 1:
            schedule.step(target=target, losses=[])
        else:
            schedule.step()
        optimizer.step()
        torch.cuda.synchronize()
        if step > 0:
            step_s.append(time.perf_counter() - t0)
    dist.barrier()
    dist.destroy_process_group()
    print(json.dumps({"rank": rank, "steps": steps, "seconds": sum(step_s), "step_s": step_s,
                      "activations": received[0], "bad": bad}), flush=True)


if __name__ == "__main__":
    main()
