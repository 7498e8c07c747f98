"""The rank's last evidence: the ``final`` event's digests, peak memory, and DDP's clean release.

``final`` (written at exit on a clean run, harness/evidence/events.h) carries
``steps_completed``, ``eval_loss`` / ``initial_eval_loss`` (the last and first iterations' mean
loss, float or None), ``params_hash`` and ``optim_hash`` (``digest`` hex strings that the judge
compares across ranks: equal iff every bit is), ``params_finite`` and, with an enabled GradScaler,
``loss_scale``. ``exit`` carries ``vm_hwm_kib`` (the process's peak resident set, KiB, or None
off Linux).
"""

from __future__ import annotations

import gc
import hashlib
import time
from typing import Any, Dict, Iterable, List, Optional

import torch


def digest(tensors: Iterable[Any]) -> str:
    """blake2b-128 of the tensors' raw bytes, in order (bit-exact: equal iff every bit is).
    Tensors of any shape, dtype and device are copied to the host (a sync on CUDA); each adds its
    dtype's name before its bytes. Anything that is not a tensor adds its ``repr``."""
    h = hashlib.blake2b(digest_size=16)
    for t in tensors:
        if isinstance(t, torch.Tensor):
            t = t.detach().to("cpu").contiguous().reshape(-1)
            h.update(str(t.dtype).encode())
            h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
        else:
            h.update(repr(t).encode())
    return h.hexdigest()


def vm_hwm_kib() -> Optional[int]:
    """The process's peak resident set size in KiB (``VmHWM`` of /proc/self/status), or None."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def final_fields(params: List[torch.Tensor], optimizers: List[Any], steps_done: int,
                 first_loss: Optional[float], last_loss: Optional[float],
                 scale: Optional[torch.Tensor]) -> Dict[str, Any]:
    """The ``final`` event's fields. ``optim_hash`` digests every optimizer's state in
    ``state_dict()`` order: parameter index, then state name (sorted), name and value in turn;
    ``scale`` is the GradScaler's scale tensor (one element) or None."""
    with torch.no_grad():
        params_finite = all(bool(torch.isfinite(p).all()) for p in params)
    optim = []
    for opt in optimizers:
        state = opt.state_dict().get("state", {})
        for key in sorted(state):
            for name in sorted(state[key]):
                optim.append(name)
                optim.append(state[key][name])
    fields = dict(steps_completed=steps_done, eval_loss=last_loss, initial_eval_loss=first_loss,
                  params_hash=digest(params), optim_hash=digest(optim),
                  params_finite=params_finite)
    if scale is not None:
        fields["loss_scale"] = float(scale)
    return fields


def release_ddp(ddp) -> None:
    """Lets DDP's Python comm hook die while the interpreter is whole.

    A Python comm hook's future carries Python callbacks; gloo's worker thread drops the
    finished work (and with it those callbacks) some time after the future completed, and
    that needs the GIL. When the main thread goes straight from the last step to interpreter
    shutdown, the worker gets the GIL during finalization, is ended with pthread_exit inside
    a noexcept frame, and the process aborts ("terminate called without an active
    exception", seen in ~1 of 10 exits on Debian's torch 1.13 with PyTorch's own
    ``default_hooks.allreduce_hook`` too). So the agent, whose exit handler runs after all of
    the job's (it was registered first), releases the GIL briefly, then frees DDP's reducer.
    Blocks about 60 ms.
    """
    time.sleep(0.05)  # the workers drop their finished work now, with the GIL free
    for attr in ("logger", "reducer"):
        try:
            delattr(ddp, attr)
        except AttributeError:
            pass
    gc.collect()
    time.sleep(0.01)
