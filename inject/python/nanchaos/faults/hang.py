"""Fault kind ``hang``: the rank stops making progress (twin of inject/hang.cpp).

``where = "step_start"``: at the iteration's first training forward; ``"before_grad_allreduce"``:
in DDP's communication hook, before the iteration's first gradient bucket enters its all-reduce
(the autograd thread stalls, so the job's ``backward()`` stalls with it);
``"before_reduce_scatter"`` (FSDP2): before the iteration's first reduce-scatter (the first FSDP
group whose backward finished), in the agent's wrapper of the ``torch.distributed`` call, before
its ``coll_enter``: the peers enter that reduce-scatter and wait; the flight recorder shows the
stopped rank never did. ``duration_ms = -1``
("forever") stalls until the job is torn down: by a peer's process-group timeout, the launcher,
or the harness at ``[job].timeout_ms``. ``stall = "device"`` needs the built-in NCCL engine and is
refused.
"""

from __future__ import annotations

import time
from typing import Optional

import torch

from .base import Fault, FaultContext, register


@register("hang")
class HangFault(Fault):
    def __init__(self, spec) -> None:
        super().__init__(spec)
        self.duration_ms = int(spec.param("duration_ms"))
        self.at = spec.param("where", "before_grad_allreduce")
        self.needs = frozenset({{"step_start": "step_start",
                                 "before_reduce_scatter": "fsdp_collective"}.get(self.at,
                                                                                 "bucket")})

    def refusal(self, micro_batches: int) -> Optional[str]:
        if (self.spec.param("stall") or "host") != "host":
            return "hang stall = \"device\" needs the built-in NCCL engine (a kernel on its stream)"
        return None

    def attach_refusal(self, agent):
        if self.at == "before_grad_allreduce" and agent.ddp is None:
            use = ("where = \"before_reduce_scatter\" or \"step_start\"; it shards its model "
                   "with FSDP2" if agent.fsdp2 else "where = \"step_start\"")
            return ("hang where = \"before_grad_allreduce\": the agent reaches the gradient "
                    "all-reduce through DDP's communication hook, and this job has no "
                    f"DistributedDataParallel model (use {use})")
        if self.at == "before_reduce_scatter" and not agent.fsdp2:
            has = ("a DistributedDataParallel model" if agent.ddp is not None
                   else "neither DDP nor FSDP2")
            return ("hang where = \"before_reduce_scatter\" stalls before FSDP2's "
                    "reduce-scatter, and this job's model is not sharded with fully_shard (it "
                    f"has {has}; use where = \"before_grad_allreduce\" or \"step_start\")")
        return None

    def _stall(self, ctx: FaultContext, where: str) -> None:
        if not self.armed(ctx):
            return
        ctx.fired(self.index, where,
                  {"duration_ms": "forever" if self.duration_ms < 0 else self.duration_ms})
        until = time.monotonic() + self.duration_ms / 1000.0
        while self.duration_ms < 0 or time.monotonic() < until:
            time.sleep(0.005)

    def on_step_start(self, ctx: FaultContext) -> None:
        if self.at == "step_start":
            self._stall(ctx, "step_start")

    def on_bucket(self, ctx: FaultContext, bucket_index: int, buffer: torch.Tensor) -> None:
        if self.at == "before_grad_allreduce" and bucket_index == 0:
            self._stall(ctx, "before_grad_allreduce")

    def on_fsdp_collective(self, ctx: FaultContext, point: str, index: int,
                           tensor: torch.Tensor) -> None:
        if self.at == "before_reduce_scatter" and point == "reduce_scatter" and index == 0:
            self._stall(ctx, "before_reduce_scatter")
