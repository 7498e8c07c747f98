"""DDP training of ``train_ddp.py``'s MLP with activation checkpointing on its hidden blocks.

Each block after the first runs through ``torch.utils.checkpoint.checkpoint``: its activations
are dropped in the forward and recomputed in backward. ``--checkpoint``:
  reentrant     ``use_reentrant=True`` (torch 1.13's default): the forward runs under
                ``no_grad``, backward reruns it with autograd on;
  nonreentrant  ``use_reentrant=False``: saved tensors are placeholders that backward refills by
                rerunning the block, checking that it saved the same tensors;
  none          no checkpointing (the reference: same numbers, bit for bit).
The first block is never checkpointed: its input is the batch, which needs no gradient, and a
reentrant checkpoint whose inputs need none returns an output without one (the block's
parameters would get no gradient; PyTorch warns).

Stack: ``synced_check.SyncedStepCheck`` after backward, with a loss-spike check
(``--spike-factor``, default 2): a non-finite loss, a spike, or non-finite gradients skip the
step on every rank; the rank whose loss was bad reports ``step_check``.

Launch (one process per rank, torchrun's environment)::

    python3 -m torch.distributed.run --nproc_per_node 2 train_checkpointed.py --checkpoint reentrant

Module names: as ``train_ddp.py`` (``layers.{0,1,2}``, ``layers.N.linear``, ``layers.N.act``,
``head``); ``layers.1`` and ``layers.2`` are the checkpointed blocks.

Checked on torch 1.13 and 2.15 (gloo, CPU).
"""

from __future__ import annotations

import argparse
import sys
from typing import List, Optional

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch.utils.checkpoint import checkpoint

from ddp_common import add_process_group_args, init_distributed, parameter_digest
from synced_check import SyncedStepCheck
from train_ddp import MLP, SyntheticClassification, evaluate


class CheckpointedMLP(MLP):
    """``MLP`` whose blocks after the first run under ``checkpoint`` (``mode`` "reentrant",
    "nonreentrant") or plainly ("none"). ``[batch, features]`` -> ``[batch, classes]``."""

    def __init__(self, features: int, hidden: int, classes: int, mode: str) -> None:
        super().__init__(features, hidden, classes)
        self.mode = mode

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.layers[0](x)
        for layer in self.layers[1:]:
            if self.mode == "none":
                x = layer(x)
            else:
                x = checkpoint(layer, x, use_reentrant=self.mode == "reentrant")
        return self.head(x)


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--checkpoint", choices=["reentrant", "nonreentrant", "none"],
                   default="reentrant")
    add_process_group_args(p)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--batch-size", type=int, default=32, help="per rank")
    p.add_argument("--lr", type=float, default=1e-2)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--spike-factor", type=float, default=2.0,
                   help="skip when the loss exceeds this x the recent mean (0: off)")
    p.add_argument("--print-digest", action="store_true")
    return p.parse_args(argv)


def main(argv: Optional[List[str]] = None) -> int:
    args = parse_args(argv)
    rank, local_rank, device, _ = init_distributed(args)
    torch.manual_seed(args.seed)
    model = CheckpointedMLP(16, 32, 4, args.checkpoint).to(device)
    ddp_model = DistributedDataParallel(
        model, device_ids=[local_rank] if device.type == "cuda" else None)
    optimizer = torch.optim.Adam(ddp_model.parameters(), lr=args.lr)
    check = SyncedStepCheck(model.parameters(), device, spike_factor=args.spike_factor)
    data = SyntheticClassification(16, 4, args.seed, rank, device)
    batches = data.batches(args.batch_size)

    skipped = 0
    for step in range(args.steps):
        x, y = next(batches)
        loss = F.cross_entropy(ddp_model(x), y)
        loss.backward()  # the checkpointed blocks are recomputed in here
        if check.should_step(loss.item(), optimizer):
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        else:
            skipped += 1
        if rank == 0 and step % 5 == 0:
            print(f"step {step:4d} | loss {loss.item():.4f} | skipped {skipped}", flush=True)
    heldout_loss, accuracy = evaluate(model, *data.heldout(256))
    if rank == 0:
        print(f"done: checkpoint={args.checkpoint} {args.steps} steps, {skipped} skipped | "
              f"heldout loss {heldout_loss:.4f} accuracy {accuracy:.3f}", flush=True)
    if args.print_digest:
        print(f"digest rank {rank} {parameter_digest(model)}", flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
