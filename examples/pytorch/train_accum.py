"""DDP training of ``train_ddp.py``'s MLP with gradient accumulation under ``no_sync()``.

Each iteration runs ``--grad-accum`` micro-batches (default 4): every micro-batch but the last
runs forward and backward inside ``ddp_model.no_sync()``, so DDP only accumulates the local
gradients, and the last one's backward all-reduces the sum once; each micro-batch's loss is
divided by ``--grad-accum`` so the step sees the mean. Under nanchaos set ``[job] micro_batches``
to ``--grad-accum``: one iteration is that many training forwards (left at 1, the agent counts
every micro-batch as an iteration and the verdict's reason says "counted 64 iterations for steps
= 16: does the job accumulate over 4 micro-batches? set micro_batches = 4").

Stack: ``synced_check.SyncedStepCheck`` after the last backward, on the iteration's loss (the
mean over its micro-batches): a non-finite loss or gradient skips the step on every rank; the
rank whose loss was non-finite reports ``step_check``.

Launch (one process per rank, torchrun's environment)::

    python3 -m torch.distributed.run --nproc_per_node 2 train_accum.py --grad-accum 4

Module names: as ``train_ddp.py`` (``layers.{0,1,2}``, ``layers.N.linear``, ``layers.N.act``,
``head``).

Checked on torch 1.13 and 2.15 (gloo, CPU).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from typing import List, Optional

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

from ddp_common import add_process_group_args, init_distributed, parameter_digest
from synced_check import SyncedStepCheck
from train_ddp import MLP, SyntheticClassification, evaluate


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_process_group_args(p)
    p.add_argument("--steps", type=int, default=16, help="optimizer steps (iterations)")
    p.add_argument("--grad-accum", type=int, default=4, help="micro-batches per iteration")
    p.add_argument("--batch-size", type=int, default=16, help="per rank and micro-batch")
    p.add_argument("--lr", type=float, default=1e-2)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--print-digest", action="store_true")
    return p.parse_args(argv)


def main(argv: Optional[List[str]] = None) -> int:
    args = parse_args(argv)
    rank, local_rank, device, _ = init_distributed(args)
    torch.manual_seed(args.seed)
    model = MLP(16, 32, 4).to(device)
    ddp_model = DistributedDataParallel(
        model, device_ids=[local_rank] if device.type == "cuda" else None)
    optimizer = torch.optim.Adam(ddp_model.parameters(), lr=args.lr)
    check = SyncedStepCheck(model.parameters(), device)
    data = SyntheticClassification(16, 4, args.seed, rank, device)
    batches = data.batches(args.batch_size)

    skipped = 0
    for step in range(args.steps):
        iteration_loss = 0.0
        for micro in range(args.grad_accum):
            x, y = next(batches)
            last = micro == args.grad_accum - 1
            with contextlib.nullcontext() if last else ddp_model.no_sync():
                loss = F.cross_entropy(ddp_model(x), y) / args.grad_accum
                loss.backward()
            iteration_loss += loss.item()
        if check.should_step(iteration_loss, optimizer):
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        else:
            skipped += 1
        if rank == 0 and step % 4 == 0:
            print(f"step {step:4d} | loss {iteration_loss:.4f} | skipped {skipped}", flush=True)
    heldout_loss, accuracy = evaluate(model, *data.heldout(256))
    if rank == 0:
        print(f"done: {args.steps} steps x {args.grad_accum} micro-batches, {skipped} skipped | "
              f"heldout loss {heldout_loss:.4f} accuracy {accuracy:.3f}", flush=True)
    if args.print_digest:
        print(f"digest rank {rank} {parameter_digest(model)}", flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
