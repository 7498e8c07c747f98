"""DDP training of ``train_ddp.py``'s MLP with an EMA of the weights and a best-model copy.

The two ways training code copies its model, written as people write them:
  * an exponential moving average of the parameters (timm's ``ModelEmaV2`` pattern): a
    ``copy.deepcopy`` of the unwrapped model made after the DDP wrap and the optimizer, in eval
    mode with ``requires_grad`` off, updated after every optimizer step
    (``ema = decay * ema + (1 - decay) * param``);
  * a best-model snapshot: every ``--eval-every`` steps the model is evaluated on a held-out
    batch (``model.eval()``, ``torch.no_grad()``) and ``copy.deepcopy``'d when it is the best so
    far. At the end the EMA and the best copy are evaluated too.

Stack: ``synced_check.SyncedStepCheck`` after backward (no spike check): a non-finite loss or
gradient skips the step on every rank, so neither the model nor its EMA takes a NaN; the rank
whose loss was non-finite reports ``step_check``.

Launch (one process per rank, torchrun's environment)::

    python3 -m torch.distributed.run --nproc_per_node 2 train_ema.py

Module names: as ``train_ddp.py`` (``layers.{0,1,2}``, ``layers.N.linear``, ``layers.N.act``,
``head``).

Checked on torch 1.13 and 2.15 (gloo, CPU).
"""

from __future__ import annotations

import argparse
import copy
import sys
from typing import List, Optional

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

from ddp_common import add_process_group_args, init_distributed, parameter_digest
from synced_check import SyncedStepCheck
from train_ddp import MLP, SyntheticClassification, evaluate


class ModelEma:
    """An exponential moving average of ``model``'s parameters and buffers, kept in a deep copy.

    ``update(model)`` after each optimizer step: ``ema = decay * ema + (1 - decay) * current``
    for floating-point entries of the state dict, a plain copy for the others."""

    def __init__(self, model: nn.Module, decay: float) -> None:
        self.module = copy.deepcopy(model).eval()
        for p in self.module.parameters():
            p.requires_grad_(False)
        self.decay = decay

    @torch.no_grad()
    def update(self, model: nn.Module) -> None:
        current = model.state_dict()
        for name, ema in self.module.state_dict().items():
            if ema.is_floating_point():
                ema.mul_(self.decay).add_(current[name], alpha=1.0 - self.decay)
            else:
                ema.copy_(current[name])


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_process_group_args(p)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--batch-size", type=int, default=32, help="per rank")
    p.add_argument("--lr", type=float, default=1e-2)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--ema-decay", type=float, default=0.9)
    p.add_argument("--eval-every", type=int, default=5)
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
    ema = ModelEma(model, args.ema_decay)  # after the DDP wrap and the optimizer, as timm does
    check = SyncedStepCheck(model.parameters(), device)
    data = SyntheticClassification(16, 4, args.seed, rank, device)
    heldout = data.heldout(256)
    batches = data.batches(args.batch_size)

    best, best_loss, best_step, skipped = None, float("inf"), -1, 0
    for step in range(args.steps):
        x, y = next(batches)
        loss = F.cross_entropy(ddp_model(x), y)
        loss.backward()
        if check.should_step(loss.item(), optimizer):
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            ema.update(model)
        else:
            skipped += 1
        if step % args.eval_every == args.eval_every - 1:
            heldout_loss, _ = evaluate(model, *heldout)
            if heldout_loss < best_loss:  # the same on every rank: the parameters are
                best, best_loss, best_step = copy.deepcopy(model), heldout_loss, step
    ema_loss, _ = evaluate(ema.module, *heldout)
    model_loss, _ = evaluate(model, *heldout)
    if rank == 0:
        best_eval = evaluate(best, *heldout)[0] if best is not None else float("nan")
        print(f"done: {args.steps} steps, {skipped} skipped | heldout loss {model_loss:.4f}, "
              f"EMA {ema_loss:.4f}, best {best_eval:.4f} at step {best_step}", flush=True)
    if args.print_digest:
        print(f"digest rank {rank} {parameter_digest(model)}", flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
