"""Fault kind ``batch``: corrupts the rank's batch before the model sees it (twin of
inject/batch.cpp). The agent reaches the batch where it enters the root module's forward:

* ``field = "inputs"``: the first floating-point positional argument of the root forward
  (a clone is corrupted and passed on, so a batch tensor the job reuses is not poisoned for good);
* ``field = "labels"``: a keyword argument named ``labels``, ``targets``, ``target`` or ``y`` of
  the root forward (Hugging Face style). Keyword inputs reach forward pre-hooks only on torch >= 2.0
  (``register_forward_pre_hook(with_kwargs=True)``); on older torch the fault is refused at load.
  Labels the job keeps to itself (``criterion(model(x), y)``) never reach the agent: the fault then
  never fires and the verdict says "injection not verified";
* ``mode = "constant_column"``: every sample gets sample 0's value in input feature ``column``
  (with input standardisation, the classic zero-std 0/0).
``mode = "empty_mask"`` belongs to the built-in transformer and is refused by the controller.
"""

from __future__ import annotations

from typing import Any, Dict, Optional

import torch

from ..plan import fmt_value, special_float
from .base import Fault, FaultContext, edit_elements, register

LABEL_KWARGS = ("labels", "targets", "target", "y")


def kwargs_hooks_supported() -> bool:
    import inspect

    try:
        sig = inspect.signature(torch.nn.Module.register_forward_pre_hook)
    except (TypeError, ValueError):
        return False
    return "with_kwargs" in sig.parameters


@register("batch")
class BatchFault(Fault):
    needs = frozenset({"batch"})

    def __init__(self, spec) -> None:
        super().__init__(spec)
        self.mode = spec.param("mode") or ""
        self.field = spec.param("field", "inputs")
        self.value = special_float(spec.param("value", "nan"))
        self.column = int(spec.param("column", 0) or 0)

    def refusal(self, micro_batches: int) -> Optional[str]:
        if self.mode == "empty_mask":
            return "batch mode = \"empty_mask\" belongs to the built-in transformer workload"
        if self.field == "labels" and not self.mode and not kwargs_hooks_supported():
            return (f"batch field = \"labels\" needs torch >= 2.0 (keyword inputs of forward "
                    f"pre-hooks); this is torch {torch.__version__}")
        return None

    def on_batch(self, ctx: FaultContext, args: tuple,
                 kwargs: Dict[str, Any]) -> Optional[tuple]:
        if not self.armed(ctx) or ctx.micro != 0:
            return None
        if self.field == "labels" and not self.mode:
            for key in LABEL_KWARGS:
                t = kwargs.get(key)
                if isinstance(t, torch.Tensor) and t.is_floating_point():
                    t = t.clone()
                    self._values(ctx, t, "labels")
                    kwargs[key] = t
                    return args
            return None
        for i, t in enumerate(args):
            if isinstance(t, torch.Tensor) and t.is_floating_point():
                t = t.clone()
                if self.mode == "constant_column":
                    if t.dim() != 2 or not 0 <= self.column < t.shape[1]:
                        return None
                    with torch.no_grad():
                        t[:, self.column] = t[0, self.column]
                    ctx.fired(self.index, "inputs", {"mode": self.mode, "column": self.column})
                else:
                    self._values(ctx, t, "inputs")
                return args[:i] + (t,) + args[i + 1:]
        return None

    def _values(self, ctx: FaultContext, t: torch.Tensor, target: str) -> None:
        idx = self.pick(ctx, t.numel())
        value = self.value

        def edit(host, where):
            host[where] = value

        edit_elements(t, idx, edit)
        ctx.fired(self.index, target, {"elements": len(idx), "value": fmt_value(value)})
