"""Fault kind ``bitflip``: silent data corruption, one bit of the IEEE-754 float32 word flipped in
chosen elements (bit 30 = the top exponent bit). Twin of inject/bitflip.cpp."""

from __future__ import annotations

import torch

from .base import TargetedFault, flip_bit, register


@register("bitflip")
class BitflipFault(TargetedFault):
    def __init__(self, spec) -> None:
        super().__init__(spec)
        self.bit = int(spec.param("bit", 30))

    def edit(self, host: torch.Tensor, where: torch.Tensor) -> None:
        flip_bit(host, where, self.bit)
