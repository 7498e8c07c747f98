"""Fault kind ``checkpoint`` on an external job: corrupts the job's own checkpoint file right
after the agent observed the ``torch.save`` that wrote it, on the saving rank, before any load
(SCENARIO_FORMAT.md "Recovery by restart"; twin of inject/checkpoint.cpp, which corrupts the
built-in job's checkpoints).

Which save (one of, as the loader checks): ``save = N``, the N-th training-state save this rank
made in this launch (1-based), or ``step = S``, the save whose step is S: the step the object
records (``ckpt_io.step_of``), else the agent's count of iterations completed at the save
(``agent_step``) -- the checkpoint *at step S* holds the state before step S runs. Modes:

- ``nan`` / ``inf`` / ``bitflip`` (``bit``, default 30, of the float32 word): the first element
  of ``target``'s tensor, or of the first floating-point tensor of the object when no target.
  ``parameter:NAME`` is found in a state dict of the object (top level or one level down;
  DDP's ``module.`` prefix ignored), ``optimizer:NAME.STATE`` in an optimizer state dict
  (``state`` / ``param_groups``), whose integer parameter ids are the attached optimizer's
  parameter order. The file is written again by the job's own ``torch.save`` call (same
  arguments) from a copy of the object whose one tensor is a corrupted clone: the job's
  objects in memory are untouched.
- ``truncate``: the file cut to half its size.
- ``delete``: the file removed; when the job renames it next (the atomic save: write a temporary
  file, then ``os.replace``), the renamed file is removed after the rename instead, so the job's
  own rename still succeeds.
- ``stale``: the file replaced by the bytes of the previous save (its final name, after the
  job's rename), under the new name.

A save to a file object or a buffer (no path) cannot be corrupted after the fact: the fault
then fails the job loudly at that save (RuntimeError), never passes silently. ``inject``
carries ``target`` (the tensor's target text, or ``""``), ``detail.mode``, ``detail.path`` and
``detail.save_step``; the ground truth (cause ``checkpoint_corruption``, step = the corrupted
save's step) is the loader's.
"""

from __future__ import annotations

import math
import os
import shutil
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch

from .base import (Fault, FaultContext, edit_elements, fault_target, flip_bit, match_target,
                   register)


@dataclass
class SavedCheckpoint:
    """One observed save: ``path`` as the job gave it ("" for a file object), ``step`` (see the
    module docstring), ``index`` (1-based, per launch), ``obj`` (what was saved) and ``resave``
    (the job's own ``torch.save`` call again with another object)."""

    path: str
    step: int
    index: int
    obj: Any
    resave: Callable[[Any], None]


def _strip(name: str) -> str:
    return name[len("module."):] if name.startswith("module.") else name


def _slots(obj: Any) -> List[Tuple[Tuple[Any, ...], Any]]:
    """(key path, value) of the object's top two levels and an optimizer state dict's per-
    parameter state (three levels: ``state`` / id / STATE), in order."""
    out: List[Tuple[Tuple[Any, ...], Any]] = []
    if not isinstance(obj, dict):
        return out
    for k, v in obj.items():
        out.append(((k,), v))
        if isinstance(v, dict):
            for k2, v2 in v.items():
                out.append(((k, k2), v2))
                if k2 == "state" and isinstance(v2, dict) and "param_groups" in v:
                    for pid, st in v2.items():
                        if isinstance(st, dict):
                            out.extend(((k, "state", pid, s), t) for s, t in st.items())
    return out


def _replaced(obj: Any, path: Tuple[Any, ...], value: Any) -> Any:
    """A copy of ``obj`` with ``value`` at key path ``path``: every dict on the path copied,
    the rest shared."""
    if not path:
        return value
    out = dict(obj)
    out[path[0]] = _replaced(obj[path[0]], path[1:], value)
    return out


@register("checkpoint")
class CheckpointFault(Fault):
    needs = frozenset({"checkpoint"})

    def __init__(self, spec) -> None:
        super().__init__(spec)
        self.save = int(spec.param("save")) if spec.is_given("save") else None
        self.mode = str(spec.param("mode"))
        self.bit = int(spec.param("bit", 30))
        self.target = fault_target(spec) if spec.is_given("target") else None
        # attach_rules.unmatched_target reads these: a target naming no parameter is refused
        # at attach, not at the save
        self.where = self.target.where if self.target else ""
        self.pattern = self.target.pattern if self.target else ""
        self._previous = ""  # the previous save's file (its name after the job's rename)
        self._pending_delete = ""  # the corrupted save's path, removed at its rename
        self._fired = False

    def refusal(self, micro_batches: int) -> Optional[str]:
        if self.spec.is_given("target") and (
                self.target is None or self.target.where not in ("parameter", "optimizer")):
            return (f"target {self.spec.param('target')!r}: a checkpoint fault hits "
                    "parameter:NAME or optimizer:NAME.STATE inside the checkpoint")
        return None

    def _chosen(self, ctx: FaultContext, saved: SavedCheckpoint) -> bool:
        if self._fired or not self.spec.hits_rank(ctx.rank):
            return False
        return saved.index == self.save if self.save is not None else saved.step == self.spec.step

    def on_checkpoint_saved(self, ctx: Any, saved: SavedCheckpoint) -> None:
        """``ctx``: the agent (its ``fired`` takes the save's step: the ``inject`` event's step
        is the corrupted save's, the fault's ground truth)."""
        previous, self._previous = self._previous, os.path.abspath(saved.path or "")
        if not self._chosen(ctx, saved):
            return
        self._fired = True
        if not saved.path:
            raise RuntimeError(f"nanchaos: [[fault]] #{self.index + 1} (checkpoint): save "
                               f"{saved.index} went to a file object, not a path; the agent "
                               "corrupts checkpoint files only")
        detail: Dict[str, Any] = {"mode": self.mode, "path": saved.path,
                                  "save_step": saved.step, "save": saved.index}
        target = ""
        if self.mode == "truncate":
            size = os.path.getsize(saved.path)
            os.truncate(saved.path, size // 2)
            detail.update(bytes=size, kept=size // 2)
        elif self.mode == "delete":
            self._pending_delete = os.path.abspath(saved.path)
            os.remove(saved.path)
            self._previous = ""
        elif self.mode == "stale":
            if not previous or not os.path.exists(previous):
                raise RuntimeError(f"nanchaos: [[fault]] #{self.index + 1} (checkpoint): mode "
                                   f"\"stale\" on save {saved.index} needs the previous save on "
                                   "disk")
            shutil.copyfile(previous, saved.path)
            detail["from"] = previous
        else:
            target, values = self._corrupt_tensor(ctx, saved)
            detail.update(values)
        ctx.fired(self.index, target, detail, step=saved.step)

    def on_checkpoint_renamed(self, ctx: FaultContext, src: str, dst: str) -> None:
        """The job renamed a file it saved (``src`` to ``dst``, absolute paths)."""
        if src == self._previous:
            self._previous = dst

    def deleted(self, src: str) -> bool:
        """True (once) when ``src``, which the job is renaming, is the file this fault deleted:
        ``ckpt_io`` then removes the rename's destination instead, so the job's rename succeeds
        and no checkpoint of that save exists."""
        if self._pending_delete and src == self._pending_delete:
            self._pending_delete = ""
            return True
        return False

    # ------------------------------------------------------------------------------------------
    def _find(self, ctx: FaultContext, obj: Any) -> Tuple[Tuple[Any, ...], torch.Tensor, str]:
        slots = [(p, v) for p, v in _slots(obj)
                 if isinstance(v, torch.Tensor) and v.is_floating_point() and v.numel() > 0]
        t = self.target
        if t is None:
            if not slots:
                raise RuntimeError("no floating-point tensor in the checkpoint")
            return slots[0][0], slots[0][1], ""
        if t.where == "parameter":
            for p, v in slots:
                if len(p) <= 2 and match_target(t.pattern, _strip(str(p[-1]))):
                    return p, v, t.text
        else:
            pid = self._optimizer_index(ctx, t.name)
            state = t.state
            for p, v in slots:
                if len(p) == 4 and p[2] == pid and p[3] == state:
                    return p, v, t.text
        raise RuntimeError(f"no float tensor {t.text} in the checkpoint")

    @staticmethod
    def _optimizer_index(ctx: FaultContext, name: str) -> Optional[int]:
        """The id ``Optimizer.state_dict()`` gives parameter ``name`` of the attached optimizer:
        its position over the param groups (torch numbers them so)."""
        opts = getattr(ctx, "optimizers", [])
        names = {id(p): n for n, p in getattr(ctx, "_named_params", [])}
        if not opts:
            return None
        params = [p for g in opts[0].param_groups for p in g["params"]]
        return next((i for i, p in enumerate(params)
                     if match_target(name, names.get(id(p), ""))), None)

    def _corrupt_tensor(self, ctx: FaultContext, saved: SavedCheckpoint):
        try:
            path, t, target = self._find(ctx, saved.obj)
        except RuntimeError as e:
            raise RuntimeError(f"nanchaos: [[fault]] #{self.index + 1} (checkpoint): {e} "
                               f"{saved.path} (save {saved.index})") from None
        bad = t.detach().clone()
        detail = edit_elements(bad, [0], self._edit)
        saved.resave(_replaced(saved.obj, path, bad))
        return target, detail

    def _edit(self, host: torch.Tensor, where: torch.Tensor) -> None:
        if self.mode == "bitflip":
            flip_bit(host, where, self.bit)
        else:
            host[where] = math.nan if self.mode == "nan" else math.inf
