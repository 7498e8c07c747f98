"""Fault base classes of the Python agent: arming, element choice, and the hook points.

A fault acts at the points of one training iteration that the agent drives (the twin of
``inject/injector.h``); each hook is called only where the plan needs it:

=====================  ==============================================================
``on_step_start``      the iteration's first training forward, before the model runs
``on_parameters``      same moment, after ``on_step_start``: parameter targets
``on_batch``           the root module's positional inputs (a tuple), before the forward
``on_activation``      a targeted module's output, or a ``nanchaos.probe`` tensor
``on_loss``            the local loss, as a ``torch.nn.functional`` loss returned it
``on_gradient``        a parameter's incoming gradient on the iteration's last micro-batch,
                       before DDP copies it into its bucket (before the all-reduce)
``on_bucket``          a DDP gradient bucket's flat buffer, just before its all-reduce
``on_fsdp_collective`` FSDP2's all-gather input or reduce-scatter input (flat), numbered
                       per iteration, just before the rank enters the collective
``lr_factor``          multiplier of every param group's lr for this optimizer step
``on_optimizer_state`` the optimizer's state tensors (``PARAM.STATE``), after its step
``on_checkpoint_saved`` the job's ``torch.save`` of training state returned (ckpt_io.py), or
                       its ``torch.distributed.checkpoint`` save did (dcp_io.py)
=====================  ==============================================================

``ctx`` is the agent: it has ``step``, ``rank``, ``world``, ``seed``, ``micro`` (micro-batch
index in the iteration), ``micro_batches`` and ``fired(fault, target, detail)``, which writes the
``inject`` event. A fault calls ``fired`` only after the tensor really changed, so "injection not
verified" keeps its meaning. Element choice comes from ``nanchaos.rng`` (same elements as the C++
injectors for the same scenario). Called from the training thread (``on_gradient``: the autograd
thread); hooks never block except ``hang``.
"""

from __future__ import annotations

import math
from typing import Any, Dict, List, Optional, Protocol, Set, Tuple, Type

import torch

from .. import rng
from ..plan import FaultSpec, fmt_value
from ..target import Target, parse_target

KINDS: Dict[str, Type["Fault"]] = {}


class FaultContext(Protocol):
    """What a fault reads of the rank it runs on and how it reports a firing: the agent
    (agent.py) is one, FSDP2's per-shard wrapper (sharded.py) another. ``step`` is the
    iteration (0-based), ``micro`` the micro-batch within it (0 .. micro_batches - 1), ``seed``
    the scenario's seed (every random choice is keyed by it, rng.py). A context may also carry
    ``replaying`` (True while the job re-executes an iteration), read with ``getattr``."""

    step: int
    rank: int
    seed: int
    micro: int

    def fired(self, fault: int, target: str, detail: Dict[str, Any],
              step: Optional[int] = None) -> None:
        """Writes the ``inject`` event of fault index ``fault`` hitting ``target``; ``step``
        is the event's step when it is not the iteration's (a checkpoint fault gives the
        corrupted save's step, its ground truth)."""



def register(kind: str):
    """Class decorator: makes ``kind`` a fault kind of the agent. Duplicate names are a bug."""

    def deco(cls):
        if kind in KINDS:
            raise RuntimeError(f"nanchaos: fault kind {kind!r} registered twice")
        cls.kind = kind
        KINDS[kind] = cls
        return cls

    return deco


class FaultRefused(ValueError):
    """The agent cannot apply this fault faithfully to this job (the message says why)."""


def match_target(pattern: str, name: str) -> bool:
    """``*`` matches any run of characters within one dot-separated segment."""
    p = n = 0
    while p < len(pattern):
        if pattern[p] == "*":
            while n < len(name) and name[n] != ".":
                n += 1
            p += 1
            continue
        if n >= len(name) or pattern[p] != name[n]:
            return False
        p += 1
        n += 1
    return n == len(name)


class Fault:
    """One planned fault. Subclasses override the hooks they act at and ``needs``."""

    kind = ""
    #: hook points this fault needs: subset of {"step_start", "parameters", "batch", "activation",
    #: "loss", "gradient", "bucket", "fsdp_collective", "lr", "optimizer", "checkpoint"}; the
    #: agent installs
    #: nothing else.
    needs: frozenset = frozenset()

    def __init__(self, spec: FaultSpec) -> None:
        self.spec = spec
        self.index = spec.index
        self._done: Set[Tuple[int, str]] = set()  # (step, target) already hit (_once)

    # --- load-time checks ------------------------------------------------------------------
    def refusal(self, micro_batches: int) -> Optional[str]:
        """Why this fault cannot be applied faithfully to any external job (None: it can)."""
        return None

    def attach_refusal(self, agent: Any) -> Optional[str]:
        """Why it cannot be applied to the job just attached (no DDP model, ...); None: it can."""
        return None

    # --- arming ----------------------------------------------------------------------------
    def _once(self, ctx: FaultContext, target: str) -> bool:
        """True the first time ``target`` is reached at ``ctx.step`` (a fault hits one call per
        step: the iteration's first micro-batch, a module's first call), False after. Always
        True in a checkpoint recompute (``ctx.replaying``, checkpointing.py): the recompute
        repeats the forward's hit, which made the first call."""
        if getattr(ctx, "replaying", False):
            return True
        key = (ctx.step, target)
        if key in self._done:
            return False
        self._done.add(key)
        return True

    def armed(self, ctx: FaultContext) -> bool:
        return self.spec.armed(ctx.seed, ctx.step, ctx.rank)

    def count_for(self, numel: int) -> int:
        s = self.spec
        fraction = s.param("fraction") if s.is_given("fraction") else None
        return rng.element_count(numel, s.param("count", 1), fraction)

    def pick(self, ctx: FaultContext, numel: int) -> List[int]:
        """Flat indices hit at this step: from (seed, fault index, step), the same on every
        rank."""
        return rng.pick_elements(ctx.seed, self.index, ctx.step, numel, self.count_for(numel))

    # --- hooks (no-ops by default) ---------------------------------------------------------
    def on_step_start(self, ctx: FaultContext) -> None:
        pass

    def on_parameters(self, ctx: FaultContext, named: List) -> None:
        pass

    def on_batch(self, ctx: FaultContext, args: tuple, kwargs: Dict[str, Any]) -> Optional[tuple]:
        return None

    def on_activation(self, ctx: FaultContext, name: str, out: Any) -> Any:
        return out

    def on_loss(self, ctx: FaultContext, loss: torch.Tensor) -> torch.Tensor:
        return loss

    def on_gradient(self, ctx: FaultContext, name: str, grad: torch.Tensor) -> torch.Tensor:
        return grad

    def on_bucket(self, ctx: FaultContext, bucket_index: int, buffer: torch.Tensor) -> None:
        pass

    def on_fsdp_collective(self, ctx: FaultContext, point: str, index: int,
                           tensor: torch.Tensor) -> None:
        pass

    def lr_factor(self, ctx: FaultContext) -> float:
        return 1.0

    def on_optimizer_state(self, ctx: FaultContext, named: List) -> None:
        pass

    def on_checkpoint_saved(self, ctx: FaultContext, saved: Any) -> None:
        pass

    def on_checkpoint_renamed(self, ctx: FaultContext, src: str, dst: str) -> None:
        pass

    def deleted(self, src: str) -> bool:
        return False


def edit_elements(t: torch.Tensor, idx: List[int], edit) -> Dict[str, Any]:
    """Applies ``edit(flat_fp32_host, index_tensor)`` to elements ``idx`` of ``t`` in place.

    Works on any dtype and device through an fp32 host copy written back (a fault is rare; its
    cost does not matter); a bit flip therefore flips the fp32 word's bit, as the C++ injectors
    do. Returns ``{"before", "after"}`` of the first element for the ``inject`` event.
    """
    with torch.no_grad():
        host = t.detach().to("cpu", torch.float32).contiguous().view(-1).clone()
        where = torch.tensor(idx, dtype=torch.long)
        before = host[idx[0]].item() if idx else math.nan
        edit(host, where)
        after = host[idx[0]].item() if idx else math.nan
        t.detach().copy_(host.view(t.shape).to(t.dtype))
    return {"before": fmt_value(before), "after": fmt_value(after)}


def flip_bit(host: torch.Tensor, where: torch.Tensor, bit: int) -> None:
    """Flips bit ``bit`` (0-31) of the float32 words at ``where`` of ``host`` (fp32, flat)."""
    words = host.view(torch.int32)
    mask = (1 << bit) if bit < 31 else -(1 << 31)  # as an int32
    words[where] = torch.bitwise_xor(words[where], torch.tensor(mask, dtype=torch.int32))


def fault_target(spec: FaultSpec) -> Optional[Target]:
    """The fault's ``target`` parsed (nanchaos.target); None when it is not a tensor target
    (the fault's ``refusal`` then names it)."""
    try:
        return parse_target(str(spec.param("target", "")))
    except ValueError:
        return None


def first_tensor(out: Any) -> Optional[torch.Tensor]:
    if isinstance(out, torch.Tensor):
        return out
    if isinstance(out, (tuple, list)) and out and isinstance(out[0], torch.Tensor):
        return out[0]
    return None


def replace_first(out: Any, new: torch.Tensor) -> Any:
    if isinstance(out, torch.Tensor):
        return new
    if isinstance(out, tuple):
        return (new,) + tuple(out[1:])
    return [new] + list(out[1:])


class TargetedFault(Fault):
    """Base of ``tensor`` and ``bitflip``: parses ``target`` and dispatches to the right hook;
    subclasses only say how elements change (``edit``) and whether that is exact under
    gradient accumulation (``accumulates_exactly``)."""

    def __init__(self, spec: FaultSpec) -> None:
        super().__init__(spec)
        self.target = fault_target(spec)
        self.where = self.target.where if self.target else ""
        self.pattern = self.target.pattern if self.target else ""
        self.needs = frozenset({{"activation": "activation", "parameter": "parameters",
                                 "gradient": "gradient", "loss": "loss",
                                 "optimizer": "optimizer"}.get(self.where, "none")})

    def edit(self, host: torch.Tensor, where: torch.Tensor) -> None:
        raise NotImplementedError

    def accumulates_exactly(self) -> bool:
        """True when hitting the last micro-batch's gradient equals hitting the accumulated one."""
        return False

    def refusal(self, micro_batches: int) -> Optional[str]:
        if self.target is None:
            return (f"target {self.spec.param('target')!r}: the Python agent hits activation:, "
                    "parameter:, gradient:, optimizer: or loss targets")
        if self.where == "gradient" and micro_batches > 1 and not self.accumulates_exactly():
            return (f"{self.kind} on {self.spec.param('target')} with micro_batches = "
                    f"{micro_batches}: the agent sees each micro-batch's gradient, not the "
                    "accumulated one, so only value = nan/inf/-inf is exact there")
        return None

    def _hit(self, ctx: FaultContext, t: torch.Tensor, target: str) -> None:
        idx = self.pick(ctx, t.numel())
        if not idx:
            return
        detail = edit_elements(t, idx, self.edit)
        detail["elements"] = len(idx)
        ctx.fired(self.index, target, detail)

    def on_parameters(self, ctx: FaultContext, named: List) -> None:
        if self.where != "parameter" or not self.armed(ctx):
            return
        for name, p in named:
            if match_target(self.pattern, name):
                self._hit(ctx, p, "parameter:" + name)

    def on_optimizer_state(self, ctx: FaultContext, named: List) -> None:
        """``named``: ``(PARAM.STATE, tensor)`` of the optimizer just stepped (local shards of
        sharded state); each matching tensor is hit once per iteration."""
        if self.where != "optimizer" or not self.armed(ctx):
            return
        for name, t in named:
            if match_target(self.pattern, name) and self._once(ctx, "optimizer:" + name):
                self._hit(ctx, t, "optimizer:" + name)

    def on_activation(self, ctx: FaultContext, name: str, out: Any) -> Any:
        if self.where != "activation" or not match_target(self.pattern, name):
            return out
        t = first_tensor(out)
        if t is None or not t.is_floating_point() or not self.armed(ctx):
            return out
        if not self._once(ctx, name):
            return out
        # Out of place, so autograd still sees the module's own output for untouched elements.
        values = t.detach().clone()
        idx = self.pick(ctx, values.numel())
        if not idx:
            return out
        detail = edit_elements(values, idx, self.edit)
        mask = torch.zeros(values.numel(), dtype=torch.bool)
        mask[torch.tensor(idx, dtype=torch.long)] = True
        mask = mask.to(values.device).view(values.shape)
        detail["elements"] = len(idx)
        ctx.fired(self.index, "activation:" + name, detail)
        return replace_first(out, torch.where(mask, values, t))

    def on_loss(self, ctx: FaultContext, loss: torch.Tensor) -> torch.Tensor:
        if self.where != "loss" or not self.armed(ctx) or not self._once(ctx, "loss"):
            return loss
        value = loss.detach().clone().reshape(1)
        detail = edit_elements(value, [0], self.edit)
        before, after = float(loss.detach()), float(value[0])
        ctx.fired(self.index, "loss", detail)
        # Scale the loss so its value becomes `after` and its gradient follows (NaN stays NaN
        # in backward, as a NaN produced by the loss computation would), as the C++ injector.
        if math.isfinite(before) and before != 0.0 and math.isfinite(after):
            return loss * (after / before)
        return loss * after

    def on_gradient(self, ctx: FaultContext, name: str, grad: torch.Tensor) -> torch.Tensor:
        if self.where != "gradient" or not match_target(self.pattern, name):
            return grad
        if not self.armed(ctx) or not self._once(ctx, name):
            return grad
        grad = grad.clone()
        self._hit(ctx, grad, "gradient:" + name)
        return grad
