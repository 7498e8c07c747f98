"""A GradScaler for the ``amp`` stack of ``train_ddp.py`` where torch has none for the device.

``make_grad_scaler(device_type)`` returns ``torch.amp.GradScaler(device_type)`` (torch >= 2.3,
cpu and cuda), else ``torch.cuda.amp.GradScaler()`` on cuda, else ``DistributedLossScaler``: the
same interface written by hand, as jobs on older torch do on CPU. The scale is a Python float
(``get_scale()``), the gradients are scaled in place, and ``unscale_`` costs one all-reduce of a
one-element float tensor when a process group is initialized.

Checked on torch 1.13 (gloo, CPU); written against APIs that torch 2.x keeps.
"""

from __future__ import annotations

from typing import Optional

import torch
import torch.distributed as dist


class DistributedLossScaler:
    """A hand-written GradScaler for CPU where ``torch.amp.GradScaler("cpu")`` is missing (< 2.3).

    Same semantics as ``torch.cuda.amp.GradScaler``: ``scale(loss)`` multiplies by the scale;
    ``unscale_(optimizer)`` divides the gradients by it and sets found_inf when any gradient is
    non-finite; ``step(optimizer)`` skips ``optimizer.step()`` on found_inf; ``update()`` backs the
    scale off by ``backoff_factor`` on found_inf and grows it by ``growth_factor`` after
    ``growth_interval`` clean steps. One difference: found_inf is all-reduced (MAX) across ranks,
    so the ranks agree even when a value goes bad after DDP's all-reduce on one rank only.
    """

    def __init__(self, init_scale: float = 2.0**16, growth_factor: float = 2.0,
                 backoff_factor: float = 0.5, growth_interval: int = 2000) -> None:
        self._scale = float(init_scale)
        self._growth_factor = growth_factor
        self._backoff_factor = backoff_factor
        self._growth_interval = growth_interval
        self._growth_tracker = 0
        self._found_inf: Optional[bool] = None  # None: not unscaled this iteration

    def scale(self, loss: torch.Tensor) -> torch.Tensor:
        return loss * self._scale

    def unscale_(self, optimizer: torch.optim.Optimizer) -> None:
        if self._found_inf is not None:
            raise RuntimeError("unscale_() has already been called since the last update()")
        inv_scale = 1.0 / self._scale
        found_inf = torch.zeros(1)
        for group in optimizer.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                found_inf = found_inf.to(p.grad.device)
                p.grad.mul_(inv_scale)
                found_inf = torch.maximum(found_inf, (~torch.isfinite(p.grad).all()).float())
        if dist.is_available() and dist.is_initialized():
            dist.all_reduce(found_inf, op=dist.ReduceOp.MAX)
        self._found_inf = bool(found_inf.item() > 0)

    def step(self, optimizer: torch.optim.Optimizer):
        if self._found_inf is None:
            self.unscale_(optimizer)
        return None if self._found_inf else optimizer.step()

    def update(self) -> None:
        if self._found_inf:
            self._scale *= self._backoff_factor
            self._growth_tracker = 0
        else:
            self._growth_tracker += 1
            if self._growth_tracker == self._growth_interval:
                self._scale *= self._growth_factor
                self._growth_tracker = 0
        self._found_inf = None

    def get_scale(self) -> float:
        return self._scale

    def is_enabled(self) -> bool:
        return True

    def state_dict(self) -> dict:
        return {"scale": self._scale, "growth_factor": self._growth_factor,
                "backoff_factor": self._backoff_factor, "growth_interval": self._growth_interval,
                "_growth_tracker": self._growth_tracker}

    def load_state_dict(self, state: dict) -> None:
        self._scale = float(state["scale"])
        self._growth_factor = state["growth_factor"]
        self._backoff_factor = state["backoff_factor"]
        self._growth_interval = state["growth_interval"]
        self._growth_tracker = state["_growth_tracker"]


def make_grad_scaler(device_type: str):
    """torch's GradScaler for ``device_type`` where it has one, else ``DistributedLossScaler``."""
    if hasattr(torch, "amp") and hasattr(torch.amp, "GradScaler"):  # torch >= 2.3, cpu and cuda
        return torch.amp.GradScaler(device_type)
    if device_type == "cuda":
        return torch.cuda.amp.GradScaler()
    return DistributedLossScaler()
