"""Activation faults inside activation checkpointing (``torch.utils.checkpoint``).

PyTorch's rule: ``checkpoint(function, *args, use_reentrant=...)`` calls ``function`` once in the
forward, keeping only its inputs, and once more in backward to recompute what it dropped:

* reentrant (torch 1.13's default): the forward call runs under ``torch.no_grad()``; backward
  recomputes with autograd on and back-propagates through the recomputed outputs;
* non-reentrant: the forward call runs with autograd on, under saved-tensor hooks that keep
  placeholders; the first backward use of a placeholder recomputes ``function``, and PyTorch
  checks that the recompute saved the same tensors (torch 1.13: "Attempt to retrieve a tensor
  saved by autograd multiple times without checkpoint recomputation being triggered in between";
  torch 2.x: ``CheckpointError`` "A different number of tensors was saved ...", or a metadata
  mismatch).

An ``activation:`` fault on a module inside ``function`` must therefore act in the forward call
(whatever its grad mode: that output is what the loss sees) and act again, identically, in the
recompute, and only there: a fault is a pure function of (seed, fault index, step, rank, element)
(rng.py), so replaying it at the forward's step gives the same values bit for bit and the same
autograd graph.

How: ``torch.utils.checkpoint.checkpoint`` is wrapped (``patch``), only while the plan has an
activation fault. Each call becomes a ``Region`` that records the agent's step and whether the
agent may inject there (an open iteration, autograd enabled where ``checkpoint`` was called: an
evaluation under ``no_grad`` is never hit); the function passed on is ``function`` run with the
region on this thread's region stack, numbering its runs: run 1 is the forward, later runs are
recomputes. ``fault_hooks.apply_activation`` (module hooks and ``nanchaos.probe``) asks
``current()``: in a forward run it applies the faults as anywhere else and records which hit the
k-th call of each target name; in a recompute it replays exactly those on the k-th call, at the
region's step, through a ``Replay`` context that writes no second ``inject`` event.

Callers reached: ``torch.utils.checkpoint.checkpoint`` looked up at call time or imported after
the agent started (the job's ``from torch.utils.checkpoint import checkpoint``,
``checkpoint_sequential``, ``torch.distributed``'s ``checkpoint_wrapper``, HF transformers'
``gradient_checkpointing_enable``). Caveats: a module is reached through its hooks, so
``checkpoint(block, x)`` is, but ``checkpoint(block.forward, x)`` only reaches ``block``'s
submodules; a checkpoint nested in a checkpointed function is replayed only when the outer one is
non-reentrant. Checked on torch 1.13 and 2.15 (tests/test_checkpointing.py).

Threads: the forward runs on the training thread; a recompute runs where autograd runs
``function`` (the backward's thread; for CUDA tensors a device thread), hence a per-thread stack.
"""

from __future__ import annotations

import functools
import threading
from typing import Any, Dict, List, Optional, Tuple, cast

import torch

_local = threading.local()


class Region:
    """One call of ``checkpoint``: ``step`` (the agent's iteration at the call), ``live`` (the
    agent may inject: an open iteration and autograd on at the call), ``runs`` (calls of the
    function so far: 1 = the forward, > 1 = recomputes), ``hits`` ((target name, call ordinal)
    -> the faults that changed that call's output in the forward) and ``calls`` (target name ->
    calls seen in the current run)."""

    __slots__ = ("step", "live", "runs", "hits", "calls")

    def __init__(self, step: int, live: bool) -> None:
        self.step = step
        self.live = live
        self.runs = 0
        self.hits: Dict[Tuple[str, int], List[Any]] = {}
        self.calls: Dict[str, int] = {}

    def ordinal(self, name: str) -> int:
        """This run's call number of target ``name`` (0 for its first call)."""
        n = self.calls.get(name, 0)
        self.calls[name] = n + 1
        return n


class Replay:
    """The fault context of a recompute: the agent as it was at the region's forward (``step``),
    ``replaying`` (faults skip their once-per-step guard) and no ``inject`` event (it was written
    in the forward; the recompute is the same injection)."""

    replaying = True

    def __init__(self, agent: Any, step: int) -> None:
        self._agent = agent
        self.step = step

    def __getattr__(self, name: str) -> Any:
        return getattr(self._agent, name)

    def fired(self, fault: int, target: str, detail: Dict[str, Any],
              step: Optional[int] = None) -> None:
        pass


def current() -> Optional[Region]:
    """The innermost checkpoint region running on this thread, or None."""
    stack = getattr(_local, "stack", None)
    return stack[-1] if stack else None


def _runner(region: Region, function):
    def run(*args, **kwargs):
        region.runs += 1
        region.calls = {}
        stack = _local.__dict__.setdefault("stack", [])
        stack.append(region)
        try:
            return function(*args, **kwargs)
        finally:
            stack.pop()

    return run


def patch(agent: Any) -> None:
    """Wraps ``torch.utils.checkpoint.checkpoint`` (module attribute) when the plan has an
    activation fault; without one the job's checkpoint is left untouched. Idempotent."""
    if "activation" not in agent.needs:
        return
    import torch.utils.checkpoint as cp

    orig = cp.checkpoint
    if getattr(orig, "_nanchaos_wrapped", False):
        return

    @functools.wraps(orig)
    def checkpoint(function, *args, **kwargs):
        region = Region(agent.step, bool(agent._open) and torch.is_grad_enabled())
        return orig(_runner(region, function), *args, **kwargs)

    cast(Any, checkpoint)._nanchaos_wrapped = True
    cp.checkpoint = cast(Any, checkpoint)
