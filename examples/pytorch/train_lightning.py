"""A PyTorch Lightning job as that community writes one: a ``LightningModule``, a
``LightningDataModule`` and ``Trainer(strategy="ddp")``; nothing in it knows about nanchaos
beyond the optional ``report_*`` calls of its stack.

Model: a small classifier, ``layers.{0,1,2}`` (``Linear`` + ``GELU`` blocks: ``layers.N.linear``,
``layers.N.act``) and ``head``. Data: a fixed synthetic classification set (``--samples``
examples of 32 features, 8 classes); Lightning adds the ``DistributedSampler``.

Stacks (``--stack``), all in ``training_step``, Lightning's place for them:

========  =================================================================================
none      nothing: a NaN on one rank reaches every rank's parameters through the all-reduce
synced    the loss's finiteness is ``self.all_gather``ed; when any rank's is non-finite every
          rank drops its gradients in ``on_before_optimizer_step`` (``zero_grad(set_to_none=
          True)``: the optimizer step then leaves every parameter and its momentum as they
          were, GradScaler's skip done by hand), the rank that saw it calls
          ``report_detection("nan_check", cause="loss_math")`` and all call
          ``report_decision("skip_step")``. Returning ``None`` instead, Lightning's "skip this
          batch", is refused under DDP since Lightning 2.1 ("Skipping the training_step by
          returning None in distributed training is not supported")
skip      the rank that sees a non-finite loss returns ``None`` alone and reports nothing:
          Lightning 2.0 then hangs (the other ranks wait in the gradient all-reduce), 2.1 and
          later raise the error above on that rank
========  =================================================================================

Run without the harness (one process per rank, torchrun's environment, gloo on CPU)::

    python3 -m torch.distributed.run --nproc_per_node 2 train_lightning.py --stack synced

``--max-steps`` optimizer steps (default 20), ``--pg-timeout-s`` the DDP process group timeout
(default 10 s: a collective whose peer stopped raises after it), ``--print-digest`` prints
``digest rank R <blake2b of the parameters>`` at the end. Needs ``lightning`` (2.x; checked with
2.0.9 on torch 1.13 and 2.6.6 on torch 2.15).
"""

from __future__ import annotations

import argparse
import datetime
import os
import warnings

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

import lightning as L
from lightning.pytorch.strategies import DDPStrategy

from ddp_common import nanchaos, parameter_digest

FEATURES, CLASSES = 32, 8


class Block(nn.Module):
    def __init__(self, d_in: int, d_out: int) -> None:
        super().__init__()
        self.linear = nn.Linear(d_in, d_out)
        self.act = nn.GELU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.linear(x))


class Classifier(L.LightningModule):
    def __init__(self, hidden: int = 64, lr: float = 0.05, stack: str = "synced") -> None:
        super().__init__()
        self.save_hyperparameters()
        self.layers = nn.Sequential(Block(FEATURES, hidden), Block(hidden, hidden),
                                    Block(hidden, hidden))
        self.head = nn.Linear(hidden, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.layers(x))

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        stack = self.hparams.stack
        if stack == "none":
            return loss
        bad_here = not bool(torch.isfinite(loss.detach()))
        if stack == "skip":  # the one-liner seen in many LightningModules; reports nothing
            return None if bad_here else loss
        # synced: every rank learns whether any rank's loss is non-finite; the step is then
        # skipped on every rank together (on_before_optimizer_step).
        flags = self.all_gather(torch.tensor(float(bad_here)))
        self._skip_step = bool(flags.max() > 0)
        if self._skip_step:
            if bad_here:
                nanchaos.report_detection("nan_check", cause="loss_math")
            nanchaos.report_decision("skip_step")
        else:
            self.log("train_loss", loss, prog_bar=False)
        return loss

    def on_before_optimizer_step(self, optimizer) -> None:
        if getattr(self, "_skip_step", False):
            optimizer.zero_grad(set_to_none=True)  # SGD skips parameters without a gradient

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=0.9)


class SyntheticData(L.LightningDataModule):
    """A fixed classification set: inputs ~ N(0, 1), labels from a fixed random linear map."""

    def __init__(self, samples: int, batch_size: int) -> None:
        super().__init__()
        self.samples, self.batch_size = samples, batch_size

    def setup(self, stage: str) -> None:
        g = torch.Generator().manual_seed(1234)
        x = torch.randn(self.samples, FEATURES, generator=g)
        w = torch.randn(FEATURES, CLASSES, generator=g)
        self.train_set = TensorDataset(x, (x @ w).argmax(dim=1))

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train_set, batch_size=self.batch_size, shuffle=True, num_workers=0)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--stack", choices=["none", "synced", "skip"], default="synced")
    p.add_argument("--max-steps", type=int, default=20)
    p.add_argument("--samples", type=int, default=4096)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--pg-timeout-s", type=float, default=10.0)
    p.add_argument("--print-digest", action="store_true")
    args = p.parse_args()
    if "OMP_NUM_THREADS" not in os.environ:
        torch.set_num_threads(1)
    warnings.filterwarnings("ignore", ".*does not have many workers.*")
    L.seed_everything(0, workers=True, verbose=False)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    trainer = L.Trainer(
        accelerator="cpu", devices=world, num_nodes=1,
        strategy=DDPStrategy(process_group_backend="gloo",
                             timeout=datetime.timedelta(seconds=args.pg_timeout_s)),
        max_steps=args.max_steps, logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, log_every_n_steps=1)
    model = Classifier(lr=args.lr, stack=args.stack)
    trainer.fit(model, datamodule=SyntheticData(args.samples, args.batch_size))
    if args.print_digest:
        print(f"digest rank {trainer.global_rank} {parameter_digest(model)}", flush=True)


if __name__ == "__main__":
    main()
