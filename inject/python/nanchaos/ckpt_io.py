"""The job's own checkpoints, observed: ``torch.save`` / ``torch.load`` of training state.

A relaunched job ([job] restarts, docs/scenario-format.md "Recovery by restart") resumes from a
checkpoint it wrote itself; the judge needs to know which one, and from which step, with no call
in the job. ``patch`` wraps ``torch.save``, ``torch.load``, ``os.replace`` and ``os.rename``:

* ``torch.save(obj, f)`` of *training state* -- a ``dict`` (a state dict, or a dict of state
  dicts) holding a tensor at its top level or one level down -- writes, once the save returned,
  ``ckpt_save {path, step, agent_step, tensors}``;
* ``torch.load(f)`` that returns training state writes ``ckpt_load {path, step, tensors}``;
* ``os.replace(src, dst)`` / ``os.rename`` of a path the job saved in this process (the atomic
  save: write a temporary file, then rename it) writes ``ckpt_rename {from, path}``.

``path``: the file name as the job gave it (``os.fspath``, or a file object's ``name``; "" for a
buffer). ``tensors``: how many tensors the object holds at those two levels.

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

Cost: nothing on the training path; a save or load pays one walk of the object's top two levels.
Checked on torch 1.13 and 2.15 (``torch.load``'s ``weights_only`` and ``mmap`` arguments are
passed through untouched).
"""

from __future__ import annotations

import functools
import os
from typing import Any, Optional, Tuple, cast

#: Top-level keys whose integer value is the checkpoint's step, in the order they are tried.
STEP_KEYS = ("step", "global_step", "iteration")


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


def training_state(obj: Any) -> Tuple[int, Optional[int]]:
    """(tensors, step) of ``obj``; tensors 0 when it is not training state."""
    return _tensor_count(obj), step_of(obj)


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
        try:
            tensors, step = training_state(obj)
            path = _path_of(f) if tensors else ""
            if path:
                saved.add(os.path.abspath(path))
        except Exception:  # never fail the job's save over the evidence
            return out
        if tensors:  # a checkpoint fault that cannot do what it must raises into the job
            agent.on_checkpoint_save(path, step, tensors, obj,
                                     lambda o: orig_save(o, f, *args, **kwargs))
        return out

    @functools.wraps(orig_load)
    def load(f, *args, **kwargs):
        obj = orig_load(f, *args, **kwargs)
        try:
            tensors, step = training_state(obj)
            if tensors:
                agent.on_checkpoint_load(_path_of(f), step, tensors)
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
