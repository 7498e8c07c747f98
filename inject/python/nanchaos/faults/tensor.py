"""Fault kind ``tensor``: overwrites (or scales) elements of an activation, a parameter, a
gradient or the local loss (docs/scenario-format.md, [[fault]] kinds). Twin of inject/tensor.cpp."""

from __future__ import annotations

import math

import torch

from ..plan import special_float
from .base import TargetedFault, register


@register("tensor")
class TensorFault(TargetedFault):
    def __init__(self, spec) -> None:
        super().__init__(spec)
        self.factor = float(spec.param("factor")) if spec.is_given("factor") else None
        self.value = special_float(spec.param("value", "nan"))

    def accumulates_exactly(self) -> bool:
        # NaN/Inf plus anything stays NaN/Inf: hitting one micro-batch equals hitting the sum.
        return self.factor is None and not math.isfinite(self.value)

    def edit(self, host: torch.Tensor, where: torch.Tensor) -> None:
        if self.factor is not None:
            host[where] = host[where] * self.factor
        else:
            host[where] = self.value
