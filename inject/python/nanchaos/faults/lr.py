"""Fault kind ``lr``: multiplies the learning rate on the hit ranks (twin of inject/lr.cpp).

Applied at the optimizer step, on top of whatever the job's own schedule wrote into
``param_groups[i]["lr"]`` that iteration: the agent multiplies every group's lr just before the
job's ``optimizer.step()`` runs and restores the job's value right after, so the job's schedule
(LambdaLR, a hand-written cosine, ...) keeps its own state.
"""

from __future__ import annotations

from .base import Fault, FaultContext, register


@register("lr")
class LrFault(Fault):
    needs = frozenset({"lr"})

    def __init__(self, spec) -> None:
        super().__init__(spec)
        self.factor = float(spec.param("factor"))

    def lr_factor(self, ctx: FaultContext) -> float:
        if not self.armed(ctx):
            return 1.0
        ctx.fired(self.index, "lr", {"factor": self.factor})
        return self.factor
