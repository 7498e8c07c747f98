"""Which module of the job is the model: the agent's attach rules as plain functions.

(Not ``attach.py``: a submodule of that name would shadow the package's ``nanchaos.attach``.)

The rules (docs/scenario-format.md "The Python agent"): the model is the module a
``DistributedDataParallel`` wraps, or else the outermost module that owns every parameter of an
optimizer, or the module named by ``nanchaos.attach``. ``Agent`` keeps the candidates it saw and
calls these at the first training-mode forward; each refusal below becomes an ``attach_error``
event and an ``agent.AttachError`` raised into the job (it must fail at start, never run
unobserved).

Names: parameter and module names are ``named_parameters()`` / ``named_modules()`` names with a
``torch.compile`` wrapper's ``_orig_mod.`` prefix removed (``strip_name``); DDP's ``module.``
prefix never appears because the agent attaches to the wrapped module.
"""

from __future__ import annotations

import difflib
import gc
import sys
from typing import Any, List, Optional, Sequence

import torch

from . import faults as faults_mod

#: Type names of a ``torch.compile``d root (torch 2.x's ``torch._dynamo.eval_frame``).
COMPILED_TYPES = ("OptimizedModule",)


def strip_name(name: str) -> str:
    """``name`` without the ``_orig_mod.`` prefix a compiled submodule adds."""
    for prefix in ("_orig_mod.",):
        if name.startswith(prefix):
            name = name[len(prefix):]
    return name


def owners_of(opt) -> List[torch.nn.Module]:
    """The outermost modules whose parameters include every parameter of ``opt`` (one scan of
    the garbage collector's objects, once per optimizer created before the model is known);
    several of them make the attach ambiguous. A DDP wrapper is replaced by its ``module``."""
    want = {id(p) for g in opt.param_groups for p in g["params"]}
    if not want:
        return []
    owners = []
    for obj in gc.get_objects():
        try:
            if not isinstance(obj, torch.nn.Module):
                continue
        except ReferenceError:
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
    from torch.nn.parallel import DistributedDataParallel as DDP

    roots = [o.module if isinstance(o, DDP) else o for o in roots]
    uniq = []
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
    """Why the agent cannot attach to ``model`` (a compiled root, an FSDP model), or None."""
    if type(model).__name__ in COMPILED_TYPES:
        return ("the model was compiled (torch.compile) before the agent could attach; "
                "call nanchaos.attach(model) before torch.compile, or compile submodules")
    # Only when the job imported FSDP itself (importing it here would cost, and fails on
    # Debian's torch 1.13 under Python 3.11).
    fsdp_mod = sys.modules.get("torch.distributed.fsdp")
    fsdp = getattr(fsdp_mod, "FullyShardedDataParallel", None)
    if fsdp is not None and any(isinstance(m, fsdp) for m in model.modules()):
        return "FSDP models are not supported by this agent yet (DDP only)"
    return None


def unmatched_target(fault: Any, names: Sequence[str], model_type: str) -> Optional[str]:
    """A parameter:/gradient: target that names no parameter of the model (``names``, stripped)
    is refused now, with the nearest names, instead of a whole run ending in "injection not
    verified". (activation: targets may be probes that only appear in the forward, so they are
    not.) ``model_type`` is the model's class name, for the message."""
    where = getattr(fault, "where", None)
    if where not in ("parameter", "gradient"):
        return None
    if any(faults_mod.match_target(fault.pattern, n) for n in names):
        return None
    hint = ""
    if fault.pattern.startswith("module."):
        hint = "; target names have no DDP `module.` prefix"
    near = difflib.get_close_matches(fault.pattern.replace("module.", "", 1), list(names), n=3)
    if near:
        hint += "; did you mean " + ", ".join(f"{where}:{n}" for n in near) + "?"
    return (f"target {where}:{fault.pattern} matches no parameter of "
            f"{model_type}{hint} (`nanchaos targets` lists them)")
