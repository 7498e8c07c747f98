"""Fault kind ``comm``: corrupts what this rank sends into a collective, after the rank's own
checks, as a faulty link or DMA would (twin of inject/comm.cpp).

``target`` unset: the gradient all-reduce of a DistributedDataParallel model, reached through
DDP's communication hook (the agent wraps the job's own hook, or DDP's default all-reduce): the
first gradient bucket the rank all-reduces in the iteration.

``target = "reduce_scatter"`` (FSDP2, ``fully_shard``): this rank's gradient contribution to the
iteration's first reduce-scatter (the first FSDP group whose backward finished, usually the last
block's), as FSDP2 hands it to ``torch.distributed``: one flat tensor of world size x the shard's
elements, rank r's chunk the padded rows of every parameter of the group that r will own
(FSDP's ``chunk_cat`` layout), already pre-divided where FSDP pre-divides. The elements that
land in rank r's chunk reach rank r's sharded gradient through the reduction; an element that
falls in FSDP's padding (a dimension 0 not divisible by the world size) is dropped by FSDP.

``target = "all_gather"`` (FSDP2): this rank's input to the iteration's first all-gather after
the model's forward began (the first FSDP block's; the root group's all-gather runs before the
model's forward hooks and belongs to the iteration before): FSDP's copy of this rank's shards,
packed flat, which is also this rank's own slot of the gathered output. Every rank, the sender
included, computes that block's forward with the corrupted rows; the sender's sharded parameter
itself is never written (FSDP copies it in anew for the next all-gather: a transient fault).

In all three, ``count`` elements chosen over the tensor (``rng.pick_elements``, the same on
every rank) get ``value`` written or their ``bit`` flipped (bit of the wire word: the tensor's
dtype). Ground truth cause ``comm_corruption``, rank = the chosen ranks.
"""

from __future__ import annotations

from typing import Optional

import torch

from ..plan import fmt_value, special_float
from .base import Fault, FaultContext, register

TARGETS = ("reduce_scatter", "all_gather")


def fsdp_groups_below_root(model: torch.nn.Module) -> int:
    """FSDP2 groups of ``model``'s submodules (``fully_shard`` applied below the root)."""
    return sum(1 for m in model.modules()
               if m is not model and getattr(m, "_get_fsdp_state", None) is not None)


@register("comm")
class CommFault(Fault):
    def __init__(self, spec) -> None:
        super().__init__(spec)
        self.bit = int(spec.param("bit")) if spec.is_given("bit") else None
        self.value = special_float(spec.param("value", "nan"))
        self.target: Optional[str] = spec.param("target")  # None: DDP's gradient all-reduce
        self.needs = frozenset({"bucket" if self.target is None else "fsdp_collective"})

    def refusal(self, micro_batches: int) -> Optional[str]:
        if self.target is not None and self.target not in TARGETS:
            return (f"comm target = {self.target!r}: the Python agent hits \"reduce_scatter\" or "
                    "\"all_gather\" (FSDP2), or, with no target, DDP's gradient all-reduce")
        return None

    def attach_refusal(self, agent):
        if self.target is None:
            if agent.ddp is not None:
                return None
            if agent.fsdp2:
                return ("comm without target hits DDP's gradient all-reduce, and this job shards "
                        "its model with FSDP2 (fully_shard): write target = \"reduce_scatter\" "
                        "or \"all_gather\"")
            return ("comm: the agent reaches the gradient all-reduce through DDP's communication "
                    "hook, and this job has no DistributedDataParallel model")
        if not agent.fsdp2:
            has = ("a DistributedDataParallel model: remove target to hit its gradient "
                   "all-reduce" if agent.ddp is not None else "neither DDP nor FSDP2")
            return (f"comm target = \"{self.target}\" hits FSDP2's {self.target.replace('_', '-')}"
                    f", and this job's model is not sharded with fully_shard (it has {has})")
        if self.target == "all_gather" and fsdp_groups_below_root(agent.model) == 0:
            return ("comm target = \"all_gather\" hits the first all-gather after the model's "
                    "forward began, and this model is sharded only at its root, whose all-gather "
                    "FSDP runs before that: shard its blocks with fully_shard too")
        return None

    def on_bucket(self, ctx: FaultContext, bucket_index: int, buffer: torch.Tensor) -> None:
        if bucket_index != 0 or not self.armed(ctx):
            return
        self._corrupt(ctx, buffer.view(-1), "grad_allreduce")

    def on_fsdp_collective(self, ctx: FaultContext, point: str, index: int,
                           tensor: torch.Tensor) -> None:
        if point != self.target or index != 0 or not self.armed(ctx):
            return
        self._corrupt(ctx, tensor.view(-1), point)

    def _corrupt(self, ctx: FaultContext, flat: torch.Tensor, where: str) -> None:
        """Writes ``value`` into (or flips ``bit`` of) the chosen elements of ``flat`` in place,
        then the ``inject`` event (``first_element``: a flat index into ``flat``, of ``numel``)."""
        idx = self.pick(ctx, flat.numel())
        if not idx:
            return
        at = torch.tensor(idx, dtype=torch.long, device=flat.device)
        with torch.no_grad():
            if self.bit is not None:
                width = flat.element_size() * 8
                if self.bit >= width:
                    return
                ints = {8: torch.int8, 16: torch.int16, 32: torch.int32, 64: torch.int64}[width]
                words = flat.view(ints)
                mask = (1 << self.bit) if self.bit < width - 1 else -(1 << (width - 1))
                words[at] = torch.bitwise_xor(words[at], torch.tensor(mask, dtype=ints,
                                                                      device=flat.device))
            else:
                flat[at] = self.value
        ctx.fired(self.index, where,
                  {"elements": len(idx), "first_element": idx[0], "numel": flat.numel(),
                   "value": None if self.bit is not None else fmt_value(self.value),
                   "bit": self.bit, "dtype": str(flat.dtype).replace("torch.", "")})
