"""The job's own ``torch.distributed.checkpoint`` (DCP) checkpoints, observed: the twin of
ckpt_io.py for a checkpoint that is a folder with one shard per rank.

A relaunched job ([job] restarts, docs/scenario-format.md "Recovery by restart") that checkpoints
with DCP resumes from a folder it wrote; the judge needs to know which one, and from which step,
with no call in the job. ``patch`` wraps, in ``torch.distributed.checkpoint`` (torch >= 2.0) and
in ``torch.distributed._shard.checkpoint`` (torch 1.13, where DCP lived, with only the older
names), the functions

* ``save`` / ``save_state_dict``: once the collective save returned (the coordinator has
  written ``.metadata``: DCP's last collective waits for it), every rank writes ``ckpt_save
  {path, step, agent_step, tensors, format: "dcp", rank, shard, shard_bytes, digests}``;
* ``load`` / ``load_state_dict``: once the load returned, ``ckpt_load {path, step, tensors,
  format: "dcp", rank, digests}``; a load that raised (a truncated, missing or unreadable
  shard: DCP raises ``CheckpointException``, a ``BaseException``, on every rank) writes
  ``ckpt_reject {path, step: null, why, format: "dcp", rank}`` and the exception goes on to
  the job.

Fields: ``path`` is the checkpoint's folder, ``checkpoint_id`` as the job gave it, else its
storage writer's or reader's ``checkpoint_id`` / ``path`` (``os.fspath``, normalised:
``ckpt/step-4/`` and ``ckpt/step-4`` are one checkpoint). ``step`` follows ckpt_io's step rule
on the state dict the job passed (``step`` / ``global_step`` / ``iteration`` at its top level;
after a load, the value DCP loaded into it); ``agent_step`` is ckpt_io's. ``rank``: this rank in
the save's process group, which is the ``N`` of DCP's file names. ``shard``: the files of this
rank in the folder (``__N_0.distcp``; DCP writes one per rank by default, one per tensor with
``single_file_per_rank=False``), ``shard_bytes`` their total size in bytes. ``tensors`` and
``digests``: the tensors of the state dict as this rank holds them, found through nested dicts,
lists and ``Stateful`` values (asked once more for their ``state_dict()``), NAME DCP's fully
qualified name (keys joined by ``.``: ``model.head.weight``), crc ckpt_io's ``tensor_digest`` of
this rank's local part (a DTensor's local shard, a ShardedTensor's local shards): a load whose
digests equal the save's restored the very bytes saved.

Which calls are seen: the agent patches a DCP package the moment it is imported (an import hook;
if it is already imported at bootstrap, at once). The bootstrap runs at interpreter start, before
the job's code, so ``import torch.distributed.checkpoint as dcp; dcp.save(...)``, ``from
torch.distributed.checkpoint import save`` and ``from torch.distributed.checkpoint.state_dict_saver
import save`` all reach the wrapper; a reference DCP itself took before the agent patched it (a
torch module importing ``state_dict_saver.save`` while the package loads) does not.
``async_save`` is seen when its thread-based upload calls ``save``; with the process-based
executor the save runs in another process, which the agent does not observe.

Cost: nothing on the training path; a save or load pays one walk of the state dict, one CRC-32
pass over this rank's tensors (a CUDA tensor copied to the host, as DCP's own writer does) and a
directory listing. Checked on torch 2.15 (``save``/``load`` with ``checkpoint_id``, and the
deprecated ``*_state_dict`` names). Torch 1.13's ``_shard.checkpoint`` (``save_state_dict`` /
``load_state_dict`` with a FileSystemWriter/Reader) is wrapped the same way, but Debian's torch
1.13 under Python 3.11 cannot import it (a dataclass field with a mutable default): there, no
job can use DCP, and nothing is observed.
"""

from __future__ import annotations

import functools
import os
import re
import sys
import threading
from typing import Any, Dict, List, Optional, Tuple, cast

from . import ckpt_io
from .import_hook import patch_when_imported

#: The DCP packages: torch 2.x's, and torch 1.13's (2.x keeps it as a deprecated alias).
PACKAGES = ("torch.distributed.checkpoint", "torch.distributed._shard.checkpoint")
SAVERS = ("save", "save_state_dict")
LOADERS = ("load", "load_state_dict")
#: Submodules that define them (patched too: ``from ...state_dict_saver import save``).
SUBMODULES = ("state_dict_saver", "state_dict_loader")
#: DCP's shard file names: ``__RANK_INDEX.distcp``.
SHARD_RE = re.compile(r"^__(\d+)_(\d+)\.distcp$")
#: How deep ``named_tensors`` looks into nested containers.
MAX_DEPTH = 16

_depth = threading.local()  # DCP calls in progress on this thread: only the outermost is seen


def named_tensors(obj: Any, prefix: str = "", depth: int = 0) -> List[Tuple[str, Any]]:
    """(FQN, tensor) of every tensor in a DCP state dict, in order: through dicts (keys as
    ``str``), lists and tuples (indices) and ``Stateful`` values (their ``state_dict()``), names
    joined by ``.`` as DCP flattens them."""
    import torch

    if isinstance(obj, torch.Tensor):
        return [(prefix, obj)]
    if depth > MAX_DEPTH:
        return []
    out: List[Tuple[str, Any]] = []
    if isinstance(obj, dict):
        for k, v in obj.items():
            out.extend(named_tensors(v, f"{prefix}.{k}" if prefix else str(k), depth + 1))
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            out.extend(named_tensors(v, f"{prefix}.{i}" if prefix else str(i), depth + 1))
    elif callable(getattr(obj, "state_dict", None)) and callable(
            getattr(obj, "load_state_dict", None)):
        out.extend(named_tensors(obj.state_dict(), prefix, depth + 1))
    return out


def _fspath(p: Any) -> str:
    if isinstance(p, (str, bytes, os.PathLike)):
        s = os.fspath(p)
        return os.path.normpath(s.decode() if isinstance(s, bytes) else s)
    return ""


def _call_parts(args: tuple, kwargs: Dict[str, Any], storage_key: str
                ) -> Tuple[str, Any, Any]:
    """(folder, storage writer/reader or None, process group or None) of a DCP call's
    arguments after the state dict: keywords, or positionally (the older names take the storage
    object second, ``process_group`` third)."""
    import torch.distributed as dist

    pg_type = getattr(dist, "ProcessGroup", None)
    storage = kwargs.get(storage_key)
    group = kwargs.get("process_group")
    path = _fspath(kwargs.get("checkpoint_id"))
    for a in args:
        if isinstance(a, (str, bytes, os.PathLike)) and not path:
            path = _fspath(a)
        elif storage is None and (hasattr(a, "path") or hasattr(a, "checkpoint_id")):
            storage = a
        elif group is None and pg_type is not None and isinstance(a, pg_type):
            group = a
    if not path and storage is not None:
        try:
            path = _fspath(getattr(storage, "checkpoint_id", None)) or _fspath(
                getattr(storage, "path", None))
        except Exception:
            path = _fspath(getattr(storage, "path", None))
    return path, storage, group


def _rank_of(group: Any, kwargs: Dict[str, Any]) -> int:
    """This rank in the DCP call's process group (the N of ``__N_0.distcp``): 0 when the
    call runs without a process group (``no_dist``, or none initialised)."""
    import torch.distributed as dist

    if kwargs.get("no_dist") or not (dist.is_available() and dist.is_initialized()):
        return 0
    return int(dist.get_rank(group) if group is not None else dist.get_rank())


def shard_files(folder: str, rank: int) -> List[str]:
    """The names of rank ``rank``'s shard files in ``folder`` (``__RANK_I.distcp``), by I."""
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    mine = [(int(m.group(2)), n) for n in names
            if (m := SHARD_RE.match(n)) is not None and int(m.group(1)) == rank]
    return [n for _, n in sorted(mine)]


def read_layout(folder: str) -> List[Tuple[str, str, List[Tuple[str, int, int, bool]]]]:
    """DCP's ``.metadata`` of ``folder`` as ``[(FQN, dtype, chunks)]``, tensors only, in the
    metadata's order (the state dict's): ``dtype`` the tensor's (``"torch.float32"``), each
    chunk ``(file, offset, length, plain)`` where one saved chunk lies (bytes; ``plain``: no
    stream transform, so the chunk is one ``torch.save`` of the chunk's tensor). ``[]`` when
    the metadata cannot be read."""
    import pickle

    try:
        with open(os.path.join(folder, ".metadata"), "rb") as fh:
            md = pickle.load(fh)
    except Exception:
        return []
    chunks: Dict[str, List[Tuple[str, int, int, bool]]] = {}
    for index, info in (getattr(md, "storage_data", None) or {}).items():
        plain = not getattr(info, "transform_descriptors", None)
        chunks.setdefault(getattr(index, "fqn", ""), []).append(
            (str(info.relative_path), int(info.offset), int(info.length), plain))
    out = []
    for fqn, m in getattr(md, "state_dict_metadata", {}).items():
        props = getattr(m, "properties", None)
        if hasattr(m, "chunks") and fqn in chunks:
            out.append((fqn, str(getattr(props, "dtype", "")), chunks[fqn]))
    return out


def file_rank(name: str) -> Optional[int]:
    """The rank of a DCP shard file name (``__2_0.distcp`` -> 2), or None."""
    m = SHARD_RE.match(name)
    return int(m.group(1)) if m else None


def _wrap_save(agent: Any, orig):
    @functools.wraps(orig)
    def save(state_dict, *args, **kwargs):
        if getattr(_depth, "n", 0):
            return orig(state_dict, *args, **kwargs)  # save_state_dict calling save, and so on
        _depth.n = 1
        try:
            with ckpt_io.quiet():
                out = orig(state_dict, *args, **kwargs)
        finally:
            _depth.n = 0
        try:
            path, _, group = _call_parts(args, kwargs, "storage_writer")
            rank = _rank_of(group, kwargs)
            named = named_tensors(state_dict)
            files = shard_files(path, rank) if path else []
            nbytes = sum(os.path.getsize(os.path.join(path, f)) for f in files)
            fields = {"format": "dcp", "rank": rank, "shard": files, "shard_bytes": nbytes,
                      "digests": ckpt_io.digests(named)}
            step = ckpt_io.step_of(state_dict)
        except Exception:  # never fail the job's save over the evidence
            return out
        from .faults.checkpoint import DcpShard

        # a checkpoint fault that cannot do what it must raises into the job
        agent.on_checkpoint_save(path, step, len(named), fields=fields,
                                 dcp=DcpShard(os.path.abspath(path) if path else "", rank, files))
        return out

    cast(Any, save)._nanchaos_wrapped = True
    return save


def _wrap_load(agent: Any, orig):
    @functools.wraps(orig)
    def load(state_dict, *args, **kwargs):
        if getattr(_depth, "n", 0):
            return orig(state_dict, *args, **kwargs)
        _depth.n = 1
        try:
            with ckpt_io.quiet():
                out = orig(state_dict, *args, **kwargs)
        except BaseException as e:  # DCP's CheckpointException derives from BaseException
            if isinstance(e, (KeyboardInterrupt, SystemExit, GeneratorExit)):
                raise
            try:
                path, _, group = _call_parts(args, kwargs, "storage_reader")
                agent.on_checkpoint_reject(path, f"{type(e).__name__}: {e}",
                                           {"format": "dcp", "rank": _rank_of(group, kwargs)})
            except Exception:
                pass
            raise
        finally:
            _depth.n = 0
        try:
            path, _, group = _call_parts(args, kwargs, "storage_reader")
            named = named_tensors(state_dict)
            agent.on_checkpoint_load(path, ckpt_io.step_of(state_dict), len(named),
                                     fields={"format": "dcp", "rank": _rank_of(group, kwargs),
                                             "digests": ckpt_io.digests(named)})
        except Exception:
            pass
        return out

    cast(Any, load)._nanchaos_wrapped = True
    return load


def _patch_module(agent: Any, mod: Any) -> None:
    """Wraps the savers and loaders ``mod`` defines or re-exports (idempotent)."""
    for names, wrap in ((SAVERS, _wrap_save), (LOADERS, _wrap_load)):
        for name in names:
            f = getattr(mod, name, None)
            if callable(f) and not getattr(f, "_nanchaos_wrapped", False):
                setattr(mod, name, wrap(agent, f))


def _patch_package(agent: Any, package: str) -> None:
    """The package's own names, then its submodules': one wrapper per original function, so a
    name re-exported in both places is one observed call."""
    pkg = sys.modules.get(package)
    if pkg is None:
        return
    wrapped: Dict[int, Any] = {}
    for sub in SUBMODULES:
        mod = sys.modules.get(f"{package}.{sub}")
        if mod is None:
            continue
        for names, wrap in ((SAVERS, _wrap_save), (LOADERS, _wrap_load)):
            for name in names:
                f = getattr(mod, name, None)
                if callable(f) and not getattr(f, "_nanchaos_wrapped", False):
                    wrapped[id(f)] = wrap(agent, f)
                    setattr(mod, name, wrapped[id(f)])
    for name in SAVERS + LOADERS:
        f = getattr(pkg, name, None)
        if callable(f) and id(f) in wrapped:
            setattr(pkg, name, wrapped[id(f)])
    _patch_module(agent, pkg)


def patch(agent: Any) -> None:
    """At bootstrap: patch the DCP packages already imported, and the others when they are."""
    for package in PACKAGES:
        _patch_package(agent, package)
    if not all(p in sys.modules for p in PACKAGES):
        patch_when_imported(PACKAGES, lambda name: _patch_package(agent, name))

