"""Fault kind ``slow``: the rank becomes a straggler, no number changes (twin of inject/slow.cpp).

Keys (``SCENARIO_FORMAT.md`` "Slow ranks and finite silent data corruption"): ``steps`` slowed
from ``step`` (0 = to the end), ``delay_ms`` added per slowed step (ms), ``fraction`` of the steps
in range slowed (drawn from the seed with ``rng.fires`` at rank 0, so every hit rank is slow on
the same steps, as ranks behind one throttled node are). ``where``, on an external job:

- ``"data"``: when the iteration's first training forward receives its batch (the agent sees
  the model's inputs, not the job's data loader; the delay lands in the same gap);
- ``"compute"``: when the loss of a training forward is computed (after the forward);
- ``"backward"``: inside the backward, in a gradient hook on the output of the iteration's first
  top-level module: it runs once every later layer's gradients exist, so under DDP the buckets of
  the last layers are already in their all-reduces (the case a "time until the first collective"
  statistic cannot see);
- ``"comm"``: before the iteration's first gradient bucket enters DDP's all-reduce (its
  communication hook) or, for FSDP2, before the first reduce-scatter.

A replayed iteration (``ctx.replaying``) is slowed again only when ``persistent`` is set. The
delay is ``time.sleep`` of the calling thread (the autograd thread for ``backward``/``comm``).
"""

from __future__ import annotations

import time
from typing import Any, Dict, Optional

import torch

from .. import rng
from .base import Fault, FaultContext, first_tensor, register


@register("slow")
class SlowFault(Fault):
    def __init__(self, spec) -> None:
        super().__init__(spec)
        self.steps = int(spec.param("steps", 1))
        self.delay_ms = int(spec.param("delay_ms"))
        self.fraction = float(spec.param("fraction", 1.0))
        self.at = spec.param("where", "compute")
        self.pattern = "*"  # backward: every top-level module gets the (once per step) hook
        self.needs = frozenset({"data": {"batch"}, "compute": {"loss"},
                                "backward": {"activation"},
                                "comm": {"bucket", "fsdp_collective"}}[self.at])

    def attach_refusal(self, agent: Any) -> Optional[str]:
        if self.at == "comm" and agent.ddp is None and not agent.fsdp2:
            return ("slow where = \"comm\" delays the gradient collective, which the agent "
                    "reaches through DDP's communication hook or FSDP2's reduce-scatter; this "
                    "job has neither (use where = \"compute\", \"backward\" or \"data\")")
        return None

    def slowed(self, ctx: FaultContext) -> bool:
        s = self.spec
        if ctx.step < s.step or (self.steps > 0 and ctx.step >= s.step + self.steps):
            return False
        if not s.hits_rank(ctx.rank):
            return False
        if getattr(ctx, "replaying", False) and not s.persistent:
            return False
        return rng.fires(ctx.seed, self.index, ctx.step, 0, self.fraction)

    def _delay(self, ctx: FaultContext) -> None:
        if not self.slowed(ctx) or not self._once(ctx, self.at):
            return
        ctx.fired(self.index, self.at, {"delay_ms": self.delay_ms})
        time.sleep(self.delay_ms / 1000.0)

    def on_batch(self, ctx: FaultContext, args: tuple, kwargs: Dict[str, Any]) -> Optional[tuple]:
        self._delay(ctx)
        return None

    def on_loss(self, ctx: FaultContext, loss: torch.Tensor) -> torch.Tensor:
        self._delay(ctx)
        return loss

    def on_activation(self, ctx: FaultContext, name: str, out: Any) -> Any:
        t = first_tensor(out)
        if t is None or not t.requires_grad or not self.slowed(ctx):
            return out
        if not self._once(ctx, self.at):
            return out
        index, delay_ms, fired = self.index, self.delay_ms, ctx.fired

        def stall(grad: torch.Tensor) -> None:
            fired(index, "backward", {"delay_ms": delay_ms})
            time.sleep(delay_ms / 1000.0)

        t.register_hook(stall)
        return out

    def on_bucket(self, ctx: FaultContext, bucket_index: int, buffer: torch.Tensor) -> None:
        if bucket_index == 0:
            self._delay(ctx)

    def on_fsdp_collective(self, ctx: FaultContext, point: str, index: int,
                           tensor: torch.Tensor) -> None:
        if point == "reduce_scatter" and index == 0:
            self._delay(ctx)
