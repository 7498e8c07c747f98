"""The job's own checkpoints, observed: ``torch.save`` / ``torch.load`` of training state.

A relaunched job ([job] restarts, docs/scenario-format.md "Recovery by restart") resumes from a
checkpoint it wrote itself; the judge needs to know which one, and from which step, with no call
in the job. ``patch`` wraps ``torch.save``, ``torch.load``, ``os.replace`` and ``os.rename``:

* ``torch.save(obj, f)`` of *training state* -- a ``dict`` (a state dict, or a dict of state
  dicts) holding a tensor at its top level or one level down -- writes, once the save returned,
  ``ckpt_save {path, step, agent_step, tensors, format: "torch", digests}``;
* ``torch.load(f)`` that returns training state writes ``ckpt_load {path, step, tensors,
  format: "torch", digests}``;
* ``os.replace(src, dst)`` / ``os.rename`` of a path the job saved in this process (the atomic
  save: write a temporary file, then rename it) writes ``ckpt_rename {from, path}``.

``path``: the file name as the job gave it (``os.fspath``, or a file object's ``name``; "" for a
buffer). ``tensors``: how many tensors the object holds down to four levels of dicts (an
optimizer state dict's per-parameter state, ``{"optimizer": {"state": {0: {"exp_avg": t}}}}``).
``digests``: ``{NAME: crc}`` for each of those tensors, NAME its keys joined by ``.``
(``model.head.weight``, ``optimizer.state.0.exp_avg``),
crc ``tensor_digest``'s 8 hex digits: the judge and a reader of the log can tell whether a
launch loaded the very bytes an earlier one saved. ``torch.distributed.checkpoint`` saves and
loads are observed by dcp_io.py, which writes the same events with ``format: "dcp"``; inside
one, the ``torch.save``/``torch.load`` calls DCP makes itself (one per tensor) are not events.

The step rule: ``step`` is the object's own record, the first of the top-level keys ``step``,
``global_step``, ``iteration`` that holds an ``int`` (or a one-element integer tensor); ``null``
when none does (an ``epoch`` is not a step). By the scenario format's convention the checkpoint
*at step s* holds the state before step s runs, so a job saving after iteration i completes
records ``i + 1``. ``agent_step`` (saves only) is the agent's own count of iterations completed
at the save, the same convention: the judge uses it for a load whose object records no step.

Resuming: a ``torch.load`` with a step, before the model's first training forward, makes that
step the agent's first iteration (``Agent.resume_at``), so the relaunched launch counts steps on
from where the checkpoint left off: fault steps, ``step_end`` records and ``[job] steps`` mean
the same in every launch. A load after training began changes no step.

Cost: nothing on the training path; a save or load pays one walk of the object's top two levels
and one CRC-32 pass over the bytes of its tensors (zlib, measured in docs/external-jobs.md
"Checkpoints and restarts"; a CUDA tensor is copied to the host first, as the save itself does).
Checked on torch 1.13 and 2.15 (``torch.load``'s ``weights_only`` and ``mmap`` arguments are
passed through untouched).
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading
import zlib
from typing import Any, Dict, Iterator, List, Optional, Tuple, cast

#: Top-level keys whose integer value is the checkpoint's step, in the order they are tried.
STEP_KEYS = ("step", "global_step", "iteration")


_quiet = threading.local()  # depth of torch.distributed.checkpoint calls on this thread


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """Inside: this thread's ``torch.save``/``torch.load`` calls are not observed (dcp_io.py: the
    per-tensor saves and loads DCP makes itself)."""
    _quiet.depth = getattr(_quiet, "depth", 0) + 1
    try:
        yield
    finally:
        _quiet.depth -= 1


def is_quiet() -> bool:
    """True inside ``quiet()`` on this thread."""
    return getattr(_quiet, "depth", 0) > 0


def local_parts(t: Any) -> List[Any]:
    """The tensors this rank holds of ``t``: a DTensor's local shard (``to_local()``), a
    ShardedTensor's local shards in order, else ``[t]``."""
    if callable(getattr(t, "to_local", None)):
        return [t.to_local()]
    if callable(getattr(t, "local_shards", None)):
        return [s.tensor for s in t.local_shards()]
    return [t]


def tensor_digest(t: Any) -> str:
    """CRC-32 (zlib's, of the IEEE polynomial) of the bytes this rank holds of tensor ``t``, as
    8 lowercase hex digits: its local parts (``local_parts``) in order, each copied to the host,
    made contiguous and read as raw bytes in its own dtype (row-major). Bit-exact: a changed
    bit changes it (up to CRC-32's 2^-32 collisions); shape and dtype are not part of it. Any
    dtype and device; ``""`` for a tensor whose bytes cannot be read (a meta or quantized one)."""
    import torch

    crc = 0
    try:
        for part in local_parts(t):
            p = part.detach()
            if p.device.type != "cpu":
                p = p.cpu()
            p = p.contiguous().reshape(-1)
            if p.numel():
                crc = zlib.crc32(p.view(torch.uint8).numpy(), crc)
    except Exception:
        return ""
    return f"{crc:08x}"


def _join(prefix: str, key: Any) -> str:
    return f"{prefix}.{key}" if prefix else str(key)


def _named_tensors(obj: Any, prefix: str = "", depth: int = 1) -> List[Tuple[str, Any]]:
    """(NAME, tensor) of the tensors of a dict down to four levels (an optimizer state dict
    one level down holds its per-parameter state at the fourth: ``optimizer.state.0.exp_avg``),
    in order; NAME the keys joined by ``.``."""
    import torch

    out: List[Tuple[str, Any]] = []
    if not isinstance(obj, dict):
        return out
    for k, v in obj.items():
        name = _join(prefix, k)
        if isinstance(v, torch.Tensor):
            out.append((name, v))
        elif isinstance(v, dict) and depth < 4:
            out.extend(_named_tensors(v, name, depth + 1))
    return out


def digests(named: List[Tuple[str, Any]]) -> Dict[str, str]:
    """``{NAME: tensor_digest}`` of (NAME, tensor) pairs, in order."""
    return {name: tensor_digest(t) for name, t in named}


def _path_of(f: Any) -> str:
    if isinstance(f, (str, bytes, os.PathLike)):
        p = os.fspath(f)
        return p.decode() if isinstance(p, bytes) else p
    name = getattr(f, "name", None)
    return name if isinstance(name, str) else ""


def _tensor_count(obj: Any) -> int:
    """Tensors at the top level of a dict or one level down (a dict of state dicts, an optimizer
    state dict's ``state``); 0 for anything but a dict."""
    import torch

    if not isinstance(obj, dict):
        return 0
    n = 0
    for v in obj.values():
        if isinstance(v, torch.Tensor):
            n += 1
        elif isinstance(v, dict):
            for w in v.values():
                if isinstance(w, torch.Tensor):
                    n += 1
                elif isinstance(w, dict):  # optimizer "state": {param id: {exp_avg: ...}}
                    n += sum(isinstance(x, torch.Tensor) for x in w.values())
    return n


def step_of(obj: Any) -> Optional[int]:
    """The step a training-state object records (see the module docstring), or None."""
    import torch

    if not isinstance(obj, dict):
        return None
    for key in STEP_KEYS:
        v = obj.get(key)
        if isinstance(v, bool):
            continue
        if isinstance(v, int):
            return v
        if (isinstance(v, torch.Tensor) and v.numel() == 1
                and not v.is_floating_point() and not v.is_complex()):
            return int(v.item())
    return None


def state_digests(obj: Any) -> Dict[str, str]:
    """``{NAME: crc}`` of the tensors of a training-state object (see the module docstring)."""
    return digests(_named_tensors(obj))


def training_state(obj: Any) -> Tuple[int, Optional[int]]:
    """(tensors, step) of ``obj``: tensors 0 when it is not training state, else how many it
    holds down to an optimizer's per-parameter state (``_named_tensors``)."""
    if not _tensor_count(obj):
        return 0, step_of(obj)
    return len(_named_tensors(obj)), step_of(obj)


def patch(agent) -> None:
    """Wraps torch.save, torch.load, os.replace and os.rename for ``agent`` (idempotent)."""
    import torch

    if getattr(torch.save, "_nanchaos_wrapped", False):
        return
    saved = set()  # absolute paths this process saved training state to
    orig_save, orig_load = torch.save, torch.load

    @functools.wraps(orig_save)
    def save(obj, f, *args, **kwargs):
        out = orig_save(obj, f, *args, **kwargs)
        if is_quiet():
            return out
        try:
            tensors, step = training_state(obj)
            path = _path_of(f) if tensors else ""
            if path:
                saved.add(os.path.abspath(path))
            fields = {"format": "torch", "digests": state_digests(obj)} if tensors else {}
        except Exception:  # never fail the job's save over the evidence
            return out
        if tensors:  # a checkpoint fault that cannot do what it must raises into the job
            agent.on_checkpoint_save(path, step, tensors, obj,
                                     lambda o: orig_save(o, f, *args, **kwargs), fields=fields)
        return out

    @functools.wraps(orig_load)
    def load(f, *args, **kwargs):
        obj = orig_load(f, *args, **kwargs)
        if is_quiet():
            return obj
        try:
            tensors, step = training_state(obj)
            if tensors:
                agent.on_checkpoint_load(_path_of(f), step, tensors,
                                         fields={"format": "torch",
                                                 "digests": state_digests(obj)})
        except Exception:
            pass
        return obj

    def wrap_rename(orig):
        @functools.wraps(orig)
        def rename(src, dst, *args, **kwargs):
            a = ""
            if saved and isinstance(src, (str, bytes, os.PathLike)):
                a = os.path.abspath(_path_of(src))
            if a not in saved:
                return orig(src, dst, *args, **kwargs)
            saved.discard(a)
            out = None
            if agent.on_checkpoint_rename(a, os.path.abspath(_path_of(dst))):
                out = orig(src, dst, *args, **kwargs)
            elif os.path.exists(dst):  # a checkpoint fault deleted the save: none at dst
                os.remove(dst)
            agent.log.write("ckpt_rename", **{"from": _path_of(src), "path": _path_of(dst)})
            return out

        return rename

    cast(Any, save)._nanchaos_wrapped = True
    torch.save = save
    torch.load = load
    os.replace = wrap_rename(os.replace)
    os.rename = wrap_rename(os.rename)
