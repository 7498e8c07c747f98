"""The stack the pattern examples share (``train_ema.py``, ``train_checkpointed.py``,
``train_accum.py``): check after backward, then every rank steps or every rank skips.

After the iteration's backward(s) and before ``optimizer.step()``, ``SyncedStepCheck.should_step``
looks at three things and all-reduces (MAX) them as one small flag tensor, so every rank takes
the same branch:

1. this rank's loss is non-finite (cause ``loss_math``: the loss is all this check sees, so a
   fault upstream of it, in an activation or the inputs, is named ``loss_math`` too);
2. this rank's loss spiked: above ``spike_factor`` x the mean of the last ``window`` losses of
   updated iterations, once ``window`` of them exist (cause ``gradient_explosion``, the word the
   scenario format uses for a spike of the loss); off when ``spike_factor`` is 0;
3. the gradients are non-finite (cause ``gradient``). DDP has already all-reduced them, so every
   rank sees the same gradients and, when neither loss flag was raised anywhere, every rank
   reports: none can tell where they came from.

A rank whose own flag 1 or 2 fired reports ``nanchaos.report_detection("step_check", ...)``;
every rank reports ``report_decision("skip_step")`` and zeroes the gradients. Checking after
backward costs the backward of a bad iteration but lets backward run every iteration (under
activation checkpointing that is where the recompute happens). Cost per iteration: one
all-reduce of 3 floats and one host read of each gradient's finiteness.

Checked on torch 1.13 and 2.15 (gloo, CPU).
"""

from __future__ import annotations

import math
from collections import deque
from typing import Iterable

import torch
import torch.distributed as dist
import torch.nn as nn

from ddp_common import nanchaos


class SyncedStepCheck:
    detector = "step_check"

    def __init__(self, params: Iterable[nn.Parameter], device: torch.device,
                 spike_factor: float = 0.0, window: int = 5) -> None:
        self.params = [p for p in params if p.requires_grad]
        self.device = device
        self.spike_factor = spike_factor
        self.recent = deque(maxlen=window)

    def _spiked(self, loss: float) -> bool:
        if self.spike_factor <= 0 or len(self.recent) < self.recent.maxlen:
            return False
        return loss > self.spike_factor * (sum(self.recent) / len(self.recent))

    def should_step(self, loss: float, optimizer: torch.optim.Optimizer) -> bool:
        """``loss``: this rank's iteration loss (a float, the mean over its micro-batches).
        Returns True when every rank may step; else every rank has zeroed its gradients."""
        loss_bad = not math.isfinite(loss)
        spiked = not loss_bad and self._spiked(loss)
        grads = [torch.isfinite(p.grad).all() for p in self.params if p.grad is not None]
        grads_bad = bool(grads) and not bool(torch.stack(grads).all())
        flags = torch.tensor([float(loss_bad), float(spiked), float(grads_bad)],
                             device=self.device)
        dist.all_reduce(flags, op=dist.ReduceOp.MAX)
        any_loss_bad, any_spike, any_grads_bad = (v > 0 for v in flags.tolist())
        if not (any_loss_bad or any_spike or any_grads_bad):
            self.recent.append(loss)
            return True
        if loss_bad:
            nanchaos.report_detection(self.detector, cause="loss_math")
        elif spiked:
            nanchaos.report_detection(self.detector, cause="gradient_explosion")
        elif any_grads_bad and not (any_loss_bad or any_spike):
            nanchaos.report_detection(self.detector, cause="gradient")
        nanchaos.report_decision("skip_step")
        optimizer.zero_grad(set_to_none=True)
        return False
