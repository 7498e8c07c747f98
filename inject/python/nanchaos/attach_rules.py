"""Which module of the job is the model: the agent's attach rules as plain functions.

(Not ``attach.py``: a submodule of that name would shadow the package's ``nanchaos.attach``.)

The rules (docs/scenario-format.md "The Python agent"): the model is the module a
``DistributedDataParallel`` wraps, or else the outermost module that owns every parameter of an
optimizer, or the module named by ``nanchaos.attach``. ``Agent`` keeps the candidates it saw and
calls these at the first training-mode forward; each refusal below becomes an ``attach_error``
event and an ``agent.AttachError`` raised into the job (it must fail at start, never run
unobserved).

Names (docs/scenario-format.md "Modern PyTorch jobs"): parameter and module names are
``named_parameters()`` / ``named_modules()`` names with every wrapper's component removed
(``strip_name``): DDP's ``module.`` (leading only: the agent attaches to the wrapped module, so it
appears only when a job wraps twice), and anywhere in the name ``torch.compile``'s ``_orig_mod.``,
Lightning's ``_forward_module.`` (its ``_LightningModuleWrapperBase`` sits between DDP and the
``LightningModule``), FSDP1's ``_fsdp_wrapped_module.`` and activation checkpointing's
``_checkpoint_wrapped_module.`` (the components PyTorch's own ``clean_tensor_name`` removes for
FSDP state dicts). A wrapper and the module it wraps then share one name; the inner module is
the one hooked (``plain_modules``). A target written with a wrapper component, or naming nothing,
is refused before the job's first optimizer step with the nearest plain names
(``unmatched_target`` at attach, ``unmatched_activation`` at the first optimizer step).
"""

from __future__ import annotations

import difflib
import gc
import sys
from typing import Any, List, Optional, Sequence

import torch

from . import faults as faults_mod

#: Module names wrappers insert, removed anywhere in a name (torch.compile's OptimizedModule,
#: Lightning's _LightningModuleWrapperBase, FSDP1's FullyShardedDataParallel, checkpoint_wrapper).
INNER_WRAPPERS = ("_orig_mod", "_forward_module", "_fsdp_wrapped_module",
                  "_checkpoint_wrapped_module")
#: Removed only while leading: DDP's (and DataParallel's) attribute for the wrapped module; a
#: model's own submodule may well be called ``module``.
LEADING_WRAPPERS = ("module",) + INNER_WRAPPERS


def strip_name(name: str) -> str:
    """``name`` (a dotted ``named_modules``/``named_parameters`` name) without wrapper components:
    ``_forward_module.net._orig_mod.0.weight`` -> ``net.0.weight``; ``module.head`` -> ``head``;
    a wrapper itself (``_forward_module``) -> ``""``."""
    parts = name.split(".") if name else []
    i = 0
    while i < len(parts) and parts[i] in LEADING_WRAPPERS:
        i += 1
    return ".".join(p for p in parts[i:] if p not in INNER_WRAPPERS)


def wrapper_in(pattern: str) -> Optional[str]:
    """The wrapper component a target pattern carries (``"_forward_module"``), or None."""
    parts = pattern.split(".")
    if parts and parts[0] in LEADING_WRAPPERS:
        return parts[0]
    return next((p for p in parts if p in INNER_WRAPPERS), None)


def own_type(model: torch.nn.Module) -> str:
    """The class name of the user's model under wrapper modules (``LightningModule`` subclass,
    not ``_LightningModuleWrapperBase``), for messages."""
    seen = 0
    while seen < 8:
        inner = next((m for n, m in model.named_children() if n in LEADING_WRAPPERS), None)
        if inner is None:
            break
        model, seen = inner, seen + 1
    return type(model).__name__


def plain_modules(model: torch.nn.Module) -> List[tuple]:
    """``(plain name, module)`` for every named submodule of ``model``, one per plain name: where a
    wrapper and the module it wraps share a name the innermost (the last in ``named_modules``'
    pre-order) is kept, so a hook runs once; wrappers whose name strips to ``""`` are dropped."""
    out: dict = {}
    for name, mod in model.named_modules():
        plain = strip_name(name)
        if plain:
            out.pop(plain, None)
            out[plain] = mod
    return list(out.items())


def owners_of(opt) -> List[torch.nn.Module]:
    """The outermost modules whose parameters include every parameter of ``opt`` (one scan of
    the garbage collector's objects, once per optimizer created before the model is known);
    several of them make the attach ambiguous. A DDP wrapper is replaced by its ``module``."""
    want = {id(p) for g in opt.param_groups for p in g["params"]}
    if not want:
        return []
    owners = []
    for obj in gc.get_objects():
        # type(), not isinstance(): isinstance reads obj.__class__, which a few module-level
        # objects compute (torch.distributed.reduce_op warns that it is deprecated, a dead
        # weakref proxy raises ReferenceError).
        if not issubclass(type(obj), torch.nn.Module):
            continue
        have = {id(p) for p in obj.parameters()}
        if want <= have:
            owners.append(obj)
    # Outermost: not a submodule of another owner.
    inner = set()
    for o in owners:
        for m in o.modules():
            if m is not o:
                inner.add(id(m))
    roots = [o for o in owners if id(o) not in inner]
    from .compiled import unwrap  # DDP's module, torch.compile's _orig_mod

    roots = [unwrap(o) for o in roots]
    uniq: List[torch.nn.Module] = []
    for r in roots:
        if all(r is not u for u in uniq):
            uniq.append(r)
    return uniq


def ambiguity(candidates: Sequence[torch.nn.Module]) -> Optional[str]:
    """Why the agent cannot choose among ``candidates`` (more than one), or None."""
    if len(candidates) <= 1:
        return None
    names = ", ".join(type(c).__name__ for c in candidates)
    return (f"cannot tell which model to attach to: {len(candidates)} candidates ({names}); "
            "call nanchaos.attach(model, optimizer) before training")


def model_refusal(model: torch.nn.Module) -> Optional[str]:
    """Why the agent cannot attach to ``model`` (an FSDP1 model), or None. A compiled model
    arrives unwrapped (``compiled.unwrap``), whenever the job compiled it."""
    # Only when the job imported FSDP itself (importing it here would cost, and fails on
    # Debian's torch 1.13 under Python 3.11).
    fsdp_mod = sys.modules.get("torch.distributed.fsdp")
    fsdp = getattr(fsdp_mod, "FullyShardedDataParallel", None)
    if fsdp is not None and any(isinstance(m, fsdp) for m in model.modules()):
        return "FSDP models are not supported by this agent yet (DDP only)"
    return None


def _names_nothing(where: str, pattern: str, names: Sequence[str], what: str) -> str:
    hint = ""
    wrapper = wrapper_in(pattern)
    if wrapper:
        hint = f"; target names are the model's own, without the wrapper's `{wrapper}.`"
    near = difflib.get_close_matches(strip_name(pattern), list(names), n=3)
    if near:
        hint += "; did you mean " + ", ".join(f"{where}:{n}" for n in near) + "?"
    return f"target {where}:{pattern} matches no {what}{hint} (`nanchaos targets` lists them)"


def unmatched_target(fault: Any, names: Sequence[str], model_type: str) -> Optional[str]:
    """A parameter:/gradient: target that names no parameter of the model (``names``, stripped),
    or an optimizer: target whose ``PARAM`` part names none, is refused at attach, with the
    nearest names, instead of a whole run ending in "injection not verified"; so is an
    activation: target written with a wrapper component (its misspellings wait for
    ``unmatched_activation``: a probe only appears in the forward). ``model_type`` is the
    model's class name, for the message."""
    where = getattr(fault, "where", None)
    if where == "activation" and wrapper_in(fault.pattern):
        return _names_nothing(where, fault.pattern, [], f"module of {model_type}")
    if where == "optimizer":  # PARAM.STATE: the state's names appear at the first step
        param, state = fault.target.name, fault.target.state
        if param and any(faults_mod.match_target(param, n) for n in names):
            return None
        return (_names_nothing(where, fault.pattern, [n + "." + (state or "exp_avg")
                                                     for n in names],
                               f"parameter's optimizer state of {model_type}")
                + "; write optimizer:PARAM.STATE (exp_avg, exp_avg_sq, momentum_buffer)")
    if where not in ("parameter", "gradient"):
        return None
    if any(faults_mod.match_target(fault.pattern, n) for n in names):
        return None
    return _names_nothing(where, fault.pattern, names, f"parameter of {model_type}")


def unmatched_activation(fault: Any, modules: Sequence[str], probes: Sequence[str],
                         model_type: str) -> Optional[str]:
    """An activation: target that matches none of the model's plain module names nor a probe
    the job called by the end of its first iteration's forwards (the agent asks at the first
    optimizer step, before it applies): refused with the nearest of both."""
    if getattr(fault, "where", None) != "activation":
        return None
    names = list(modules) + [p for p in probes if p not in modules]
    if any(faults_mod.match_target(fault.pattern, n) for n in names):
        return None
    return _names_nothing("activation", fault.pattern, names,
                          f"module of {model_type} nor a probe the job called in iteration 0")
