"""Fault kind ``bitflip``: silent data corruption, one bit of the IEEE-754 float32 word flipped in
chosen elements (bit 30 = the top exponent bit). Twin of inject/bitflip.cpp."""

from __future__ import annotations

import torch

from .base import TargetedFault, register


@register("bitflip")
class BitflipFault(TargetedFault):
    def __init__(self, spec) -> None:
        super().__init__(spec)
        bit = int(spec.param("bit", 30))
        self.mask = (1 << bit) if bit < 31 else -(1 << 31)  # as an int32

    def edit(self, host: torch.Tensor, where: torch.Tensor) -> None:
        words = host.view(torch.int32)
        words[where] = torch.bitwise_xor(words[where], torch.tensor(self.mask, dtype=torch.int32))
