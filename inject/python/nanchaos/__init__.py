"""nanchaos: the Python agent that puts a PyTorch training job under the nanchaos harness.

Run under ``nanchaos run`` (a scenario with ``[job] workload = "external"``), the agent attaches
by itself through the ``sitecustomize`` bootstrap on PYTHONPATH (docs/external-jobs.md): nothing
in the job has to change. The four calls below let a job say more; each is a cheap no-op outside
the harness (one global lookup), so they can stay in production code. ``sdc_check(fn)`` (sdc.py)
is the one check that needs a code change: it runs the job's step closure twice and compares the
local gradients bit for bit (finite silent data corruption); it runs outside the harness too.

Checked on torch 1.13 (Debian's python3-torch, gloo on CPU); written for torch 2.x as well.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Optional

from . import _bootstrap

if TYPE_CHECKING:  # torch is imported by the job, not by importing nanchaos
    import torch

    from .sdc import SdcMismatch

__all__ = ["attach", "report_detection", "report_decision", "probe", "active", "sdc_check",
           "SdcMismatch", "SdcNotDeterministic"]
__version__ = "0.1.0"


def active() -> bool:
    """True when this process runs under the nanchaos harness with the agent attached."""
    return _bootstrap.agent() is not None


def attach(model: torch.nn.Module, optimizer: Optional[torch.optim.Optimizer] = None,
           scaler: Any = None) -> None:
    """Says which model (``torch.nn.Module``, DDP-wrapped or not), optimizer and GradScaler to
    observe, where finding them alone is ambiguous (several models, an EMA copy, a GAN). Call it
    before the first training forward. ``scaler``: a ``torch.amp.GradScaler`` (or
    ``torch.cuda.amp``'s), or None. Raises ``AttachError`` when the agent already attached to
    a different model."""
    a = _bootstrap.agent()
    if a is not None:
        a.explicit_attach(model, optimizer, scaler)


def report_detection(detector: str, *, layer: Optional[str] = None, cause: Optional[str] = None,
                     step: Optional[int] = None) -> None:
    """The job's stack caught something on this rank. ``detector`` is the stack's own name for the
    check (it becomes ``first_detector``); ``layer`` a module or parameter name (as in
    ``nanchaos targets``), ``cause`` a docs/scenario-format.md cause (``data``, ``loss_math``,
    ``activation``, ``gradient``, ``parameter``, ``fp16_overflow``, ...); ``step`` defaults to the
    current iteration (0-based, the agent's step clock). Call it on the rank whose check fired."""
    a = _bootstrap.agent()
    if a is not None:
        a.report_detection(detector, layer=layer, cause=cause, step=step)


def report_decision(action: str, *, step: Optional[int] = None) -> None:
    """What the stack did about a detection: ``skip_step``, ``rollback``, ``lr_backoff``,
    ``abort`` (also logged as the rank's abort, so the outcome is ``aborted``) or the job's own
    word. Call it on every rank that takes the decision."""
    a = _bootstrap.agent()
    if a is not None:
        a.report_decision(action, step=step)


def probe(name: str, tensor: torch.Tensor) -> torch.Tensor:
    """An extra named injection and probe point, ``activation:NAME``, where no module boundary
    exists (a functional block inside a forward). Returns ``tensor`` (or, when a planned fault
    hits it this iteration, a corrupted copy that autograd still connects): use the return
    value. Any shape and floating dtype."""
    a = _bootstrap.agent()
    if a is None:
        return tensor
    return a.probe(name, tensor)


def sdc_check(fn: Callable[[], Any], model: Optional[torch.nn.Module] = None
              ) -> Optional[SdcMismatch]:
    """Runs the job's step closure ``fn`` (forward and backward on one batch) twice and compares
    the local gradients and module outputs bit for bit: finite silent data corruption. Returns
    None when the runs agree, else an ``SdcMismatch(layer, cause)`` (also the rank's ``sdc``
    detection under the harness). Not a no-op outside the harness: it runs the check there too.
    The procedure, its cost and its limits: ``nanchaos.sdc`` (sdc.py)."""
    from .sdc import sdc_check as check  # imports torch: only when called

    return check(fn, model)


def __getattr__(name: str) -> Any:
    # SdcMismatch and SdcNotDeterministic (sdc.py) without importing torch with the package.
    if name in ("SdcMismatch", "SdcNotDeterministic"):
        from . import sdc

        return getattr(sdc, name)
    raise AttributeError(f"module 'nanchaos' has no attribute {name!r}")
