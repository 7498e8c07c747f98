"""Fault kind ``comm``: corrupts this rank's contribution to the gradient all-reduce, after the
rank's own checks, as a faulty link or DMA would (twin of inject/comm.cpp).

The agent reaches the contribution through DDP's communication hook (it wraps the job's own hook,
or DDP's default all-reduce): the first gradient bucket the rank all-reduces in the iteration has
``count`` elements of its flat buffer overwritten with ``value`` or their ``bit`` flipped (bit of
the wire word: the bucket's dtype). Needs a DistributedDataParallel model.
"""

from __future__ import annotations

import torch

from ..plan import fmt_value, special_float
from .base import Fault, register


@register("comm")
class CommFault(Fault):
    needs = frozenset({"bucket"})

    def __init__(self, spec) -> None:
        super().__init__(spec)
        self.bit = int(spec.param("bit")) if spec.is_given("bit") else None
        self.value = special_float(spec.param("value", "nan"))

    def attach_refusal(self, agent):
        if agent.ddp is None:
            return ("comm: the agent reaches the gradient all-reduce through DDP's communication "
                    "hook, and this job has no DistributedDataParallel model")
        return None

    def on_bucket(self, ctx, bucket_index, buffer):
        if bucket_index != 0 or not self.armed(ctx):
            return
        idx = self.pick(ctx, buffer.numel())
        if not idx:
            return
        where = torch.tensor(idx, dtype=torch.long, device=buffer.device)
        flat = buffer.view(-1)
        with torch.no_grad():
            if self.bit is not None:
                width = flat.element_size() * 8
                if self.bit >= width:
                    return
                ints = {8: torch.int8, 16: torch.int16, 32: torch.int32, 64: torch.int64}[width]
                words = flat.view(ints)
                mask = (1 << self.bit) if self.bit < width - 1 else -(1 << (width - 1))
                words[where] = torch.bitwise_xor(words[where], torch.tensor(mask, dtype=ints,
                                                                            device=flat.device))
            else:
                flat[where] = self.value
        ctx.fired(self.index, "grad_allreduce",
                  {"elements": len(idx), "first_element": idx[0],
                   "value": None if self.bit is not None else fmt_value(self.value),
                   "bit": self.bit, "dtype": str(flat.dtype).replace("torch.", "")})
