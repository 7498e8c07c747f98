"""Fault kind ``overflow``: an fp16 overflow point. Multiplies a module's output by ``factor``
(default 1e5) in the output's own dtype, so under fp16/bf16 autocast the values really leave the
half range (±inf), as in inject/overflow.cpp."""

from __future__ import annotations

from typing import Any, Optional

from .base import (Fault, FaultContext, fault_target, first_tensor, match_target, register,
                   replace_first)


@register("overflow")
class OverflowFault(Fault):
    needs = frozenset({"activation"})

    def __init__(self, spec) -> None:
        super().__init__(spec)
        self.target = fault_target(spec)
        self.where = self.target.where if self.target else ""
        self.pattern = self.target.pattern if self.target else ""
        self.factor = float(spec.param("factor", 1e5))

    def refusal(self, micro_batches: int) -> Optional[str]:
        if self.where != "activation":
            return "overflow: target must be activation:MODULE"
        return None

    def on_activation(self, ctx: FaultContext, name: str, out: Any) -> Any:
        if not match_target(self.pattern, name):
            return out
        t = first_tensor(out)
        if t is None or not t.is_floating_point() or not self.armed(ctx):
            return out
        if not self._once(ctx, name):
            return out
        scaled = t * self.factor
        ctx.fired(self.index, "activation:" + name,
                  {"factor": self.factor, "max_abs_before": float(t.detach().abs().max()),
                   "dtype": str(t.dtype).replace("torch.", "")})
        return replace_first(out, scaled)
