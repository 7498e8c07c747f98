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

A ``torch.distributed.checkpoint`` save (dcp_io.py: a folder, one shard per rank) is corrupted
in the shard of the rank the fault runs on: ``ranks`` picks the shards (rank r's agent acts on
``__r_*.distcp``, the files r wrote, once the collective save returned, so ``.metadata`` is in
place, before any load). ``truncate`` cuts each of them to half, ``delete`` removes them,
``stale`` replaces each by the same-named shard file of the previous DCP save (its folder must
still be on disk). ``nan`` / ``inf`` / ``bitflip`` find the tensor through DCP's ``.metadata``
(the chunk's file, offset and length): ``target``'s tensor (``parameter:NAME`` matches an FQN
or the FQN without its first component -- ``model.head.weight`` -- DDP's ``module.`` ignored;
``optimizer:NAME.STATE`` the FQN's part after its ``state`` component, a parameter name as
``get_state_dict`` writes it or an integer id as ``Optimizer.state_dict()`` does), or without a
target the first floating-point tensor of the rank's shard. DCP's deduplication gives each
replicated tensor to one rank's shard: the fault acts on the rank in ``ranks`` whose shard holds
the target (the others leave it), and fails the job naming the rank to give when none does. The
chunk (one ``torch.save`` of the tensor) is read, its first element rewritten, saved again and
written back in place when its size is unchanged; a chunk written through a stream transform
(DCP's experimental ``_extensions``) or in another serialization format fails the job at the
save: not implemented for such DCP checkpoints. ``detail`` then carries ``shard`` (the rank),
``files`` and, into a tensor, ``fqn`` and ``file``.

A save to a file object or a buffer (no path) cannot be corrupted after the fact: the fault
then fails the job loudly at that save (RuntimeError), never passes silently. ``inject``
carries ``target`` (the tensor's target text, or ``""``), ``detail.mode``, ``detail.path`` and
``detail.save_step``; the ground truth (cause ``checkpoint_corruption``, step = the corrupted
save's step) is the loader's.
"""

from __future__ import annotations

import io
import math
import os
import shutil
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch

from .base import (Fault, FaultContext, edit_elements, fault_target, flip_bit, match_target,
                   register)


@dataclass
class DcpShard:
    """This rank's part of a DCP checkpoint (dcp_io.py): ``folder`` (absolute; "" when the
    storage is not a local folder), ``rank`` (the N of ``__N_*.distcp``: this rank in the save's
    process group) and ``files`` (its shard files' names in the folder, in order)."""

    folder: str
    rank: int
    files: List[str] = field(default_factory=list)


@dataclass
class SavedCheckpoint:
    """One observed save: ``path`` as the job gave it ("" for a file object; a DCP save's
    folder), ``step`` (see the module docstring), ``index`` (1-based, per launch), ``obj`` (what
    was saved; None for DCP), ``resave`` (the job's own ``torch.save`` call again with another
    object; None for DCP) and ``dcp`` (this rank's shard of a DCP save, else None)."""

    path: str
    step: int
    index: int
    obj: Any
    resave: Optional[Callable[[Any], None]]
    dcp: Optional[DcpShard] = None


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
        self._previous_dcp: Optional[DcpShard] = None  # the previous DCP save's shard
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

    def on_checkpoint_saved(self, ctx: FaultContext, saved: SavedCheckpoint) -> None:
        """``ctx``: the rank's fault context (its ``fired`` takes the save's step: the
        ``inject`` event's step is the corrupted save's, the fault's ground truth)."""
        if saved.dcp is not None:
            self._on_dcp_saved(ctx, saved, saved.dcp)
            return
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

    def _on_dcp_saved(self, ctx: FaultContext, saved: SavedCheckpoint, shard: DcpShard) -> None:
        previous, self._previous_dcp = self._previous_dcp, shard
        if not self._chosen(ctx, saved):
            return
        self._fired = True
        where = (f"nanchaos: [[fault]] #{self.index + 1} (checkpoint): DCP save {saved.index} "
                 f"({saved.path or 'no path'})")
        if not shard.folder or not os.path.isdir(shard.folder):
            raise RuntimeError(f"{where} is not a local folder; the agent corrupts checkpoint "
                               "files only")
        if not shard.files:
            raise RuntimeError(f"{where}: rank {shard.rank} wrote no shard file (__"
                               f"{shard.rank}_*.distcp) in it")
        detail: Dict[str, Any] = {"mode": self.mode, "path": saved.path,
                                  "save_step": saved.step, "save": saved.index,
                                  "shard": shard.rank, "files": list(shard.files)}
        paths = [os.path.join(shard.folder, f) for f in shard.files]
        target = ""
        if self.mode == "truncate":
            sizes = [os.path.getsize(p) for p in paths]
            for p, size in zip(paths, sizes):
                os.truncate(p, size // 2)
            detail.update(bytes=sum(sizes), kept=sum(size // 2 for size in sizes))
        elif self.mode == "delete":
            for p in paths:
                os.remove(p)
            self._previous_dcp = None
        elif self.mode == "stale":
            olds = [os.path.join(previous.folder, f) for f in shard.files] if previous else []
            if not olds or not all(os.path.exists(p) for p in olds):
                raise RuntimeError(f"{where}: mode \"stale\" needs the previous DCP save's "
                                   f"shard ({', '.join(shard.files)}) on disk")
            for old, p in zip(olds, paths):
                shutil.copyfile(old, p)
            detail["from"] = previous.folder if previous else ""
        else:
            hit = self._corrupt_dcp_tensor(ctx, shard, where)
            if hit is None:  # another rank of `ranks` holds the target in its shard
                return
            target, values = hit
            detail.update(values)
        ctx.fired(self.index, target, detail, step=saved.step)

    def _dcp_matches(self, ctx: FaultContext, fqn: str) -> bool:
        t = self.target
        if t is None:
            return False
        if t.where == "parameter":
            return any(match_target(t.pattern, _strip(c)) for c in (fqn, fqn.partition(".")[2])
                       if c)
        parts = fqn.split(".")
        if "state" not in parts:
            return False
        rest = parts[parts.index("state") + 1:]
        if len(rest) < 2 or rest[-1] != t.state:
            return False
        name = ".".join(rest[:-1])
        if name.isdigit():
            return int(name) == self._optimizer_index(ctx, t.name)
        return match_target(t.name, _strip(name))

    def _corrupt_dcp_tensor(self, ctx: FaultContext, shard: DcpShard, where: str
                            ) -> Optional[Tuple[str, Dict[str, Any]]]:
        """Rewrites the first element of the target's chunk in this rank's shard; None when
        another rank in ``ranks`` holds it."""
        from ..ckpt_io import quiet
        from ..dcp_io import file_rank, read_layout

        layout = read_layout(shard.folder)
        if not layout:
            raise RuntimeError(f"{where}: cannot read its .metadata")
        mine = set(shard.files)
        floats = [e for e in layout if e[1] in ("torch.float32", "torch.float64",
                                                "torch.float16", "torch.bfloat16")]
        if self.target is None:
            entry = next((e for e in floats if any(c[0] in mine for c in e[2])), None)
            if entry is None:
                raise RuntimeError(f"{where}: no floating-point tensor in rank {shard.rank}'s "
                                   "shard")
        else:
            entry = next((e for e in floats if self._dcp_matches(ctx, e[0])), None)
            if entry is None:
                raise RuntimeError(f"{where}: no float tensor {self.target.text} in it")
            if not any(c[0] in mine for c in entry[2]):
                owners = sorted({r for c in entry[2] if (r := file_rank(c[0])) is not None})
                if any(self.spec.hits_rank(r) for r in owners):
                    return None
                raise RuntimeError(f"{where}: {self.target.text} ({entry[0]}) is in rank "
                                   f"{owners}'s shard, not in a shard of `ranks`; give ranks = "
                                   f"{owners[:1]}")
        fqn, _, chunks = entry
        name, offset, length, plain = next(c for c in chunks if c[0] in mine)
        path = os.path.join(shard.folder, name)
        if not plain:
            raise RuntimeError(f"{where}: {fqn} in {name} is written through a stream "
                               "transform; nan/inf/bitflip are not implemented for such DCP "
                               "checkpoints (truncate, delete and stale are)")
        with open(path, "rb") as fh:
            fh.seek(offset)
            blob = fh.read(length)
        with quiet():
            try:
                t = torch.load(io.BytesIO(blob), map_location="cpu")
            except Exception as e:
                t = e
            if not isinstance(t, torch.Tensor):
                raise RuntimeError(f"{where}: {fqn} in {name} is not one torch.save of a tensor "
                                   "(another DCP serialization format); nan/inf/bitflip are not "
                                   "implemented for such DCP checkpoints (truncate, delete and "
                                   "stale are)")
            values = edit_elements(t, [0], self._edit)
            out = io.BytesIO()
            torch.save(t, out)
        if out.getbuffer().nbytes != length:
            raise RuntimeError(f"{where}: {fqn} saved again is {out.getbuffer().nbytes} bytes, "
                               f"not its chunk's {length}: not written")
        with open(path, "r+b") as fh:
            fh.seek(offset)
            fh.write(out.getbuffer())
        values.update(fqn=fqn, file=name)
        return (self.target.text if self.target else ""), values

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
        if saved.resave is None:
            raise RuntimeError(f"nanchaos: [[fault]] #{self.index + 1} (checkpoint): save "
                               f"{saved.index} cannot be written again")
        bad = t.detach().clone()
        detail = edit_elements(bad, [0], self._edit)
        saved.resave(_replaced(saved.obj, path, bad))
        return target, detail

    def _edit(self, host: torch.Tensor, where: torch.Tensor) -> None:
        if self.mode == "bitflip":
            flip_bit(host, where, self.bit)
        else:
            host[where] = math.nan if self.mode == "nan" else math.inf
