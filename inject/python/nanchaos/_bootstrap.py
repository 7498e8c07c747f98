"""Zero-change attach: run by ``sitecustomize`` at interpreter start when the harness launched
this process (``$NANCHAOS_EVENTS`` is set).

Order matters: the ``agent`` event is written first (it proves the bootstrap ran in this
interpreter), then torch is imported (an interpreter without torch is an ``attach_error`` naming
the interpreter, and the job is stopped at once: it must never run unobserved; otherwise an
``imported`` event gives the import's wall time, ``import_ms``, ms), the plan is loaded
and checked (a fault the agent cannot apply faithfully is refused the same way), and the patches
are installed before the job's own code imports anything. Child interpreters of the job (spawned
DataLoader workers, a subprocess) inherit the environment but not the agent: the first process
claims ``NANCHAOS_AGENT_PID`` and the others stay silent.
"""

from __future__ import annotations

import atexit
import functools
import os
import sys
from typing import Any, cast

_agent = None

#: The ``torch.nn.functional`` losses wrapped to see each micro-batch's loss (the ``nn.*Loss``
#: modules call them); a job with another loss is seen through ``backward()`` of a scalar.
LOSS_FUNCTIONS = (
    "cross_entropy", "nll_loss", "mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss",
    "binary_cross_entropy", "binary_cross_entropy_with_logits", "kl_div", "poisson_nll_loss",
    "gaussian_nll_loss", "soft_margin_loss", "multilabel_soft_margin_loss", "margin_ranking_loss",
    "hinge_embedding_loss", "cosine_embedding_loss", "multi_margin_loss", "triplet_margin_loss",
    "ctc_loss",
)


def agent():
    """The process's Agent, or None when not run under nanchaos."""
    return _agent


def _refuse(log, rank: int, reason: str) -> None:
    log.write("attach_error", rank=rank, reason=reason)
    log.close()
    from .log import logger

    logger(rank).error("%s", reason)
    os._exit(2)


def install() -> None:
    global _agent
    events = os.environ.get("NANCHAOS_EVENTS")
    if not events or _agent is not None:
        return
    owner = os.environ.get("NANCHAOS_AGENT_PID")
    if owner and owner != str(os.getpid()):
        return  # a child process of the job: the parent's agent speaks for the rank
    os.environ["NANCHAOS_AGENT_PID"] = str(os.getpid())
    from .events import EventLog

    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    try:
        log = EventLog(events, os.getpid())
    except OSError as e:
        from .log import logger

        logger(rank).error("cannot open the event log %s: %s", events, e.strerror)
        os._exit(2)
    log.write("agent", rank=rank, pid=os.getpid(), python=sys.executable,
              python_version=sys.version.split()[0])
    # This rank ends itself if the controller or the launcher dies (harness/common/job_guard.h).
    from . import guard

    guard.start(f"nanchaos rank {rank}")
    try:
        _start(log, rank, world)
    except SystemExit:
        raise
    except BaseException as e:  # a bug of the agent must not leave the job running unobserved
        import traceback

        _refuse(log, rank, "the agent failed to start: " + "".join(
            traceback.format_exception_only(type(e), e)).strip())


def _start(log, rank: int, world: int) -> None:
    global _agent
    import time

    t0 = time.perf_counter()
    try:
        import torch  # noqa: F401
    except Exception as e:  # ImportError, or a broken install raising something else
        _refuse(log, rank,
                f"this interpreter ({sys.executable}, Python {sys.version.split()[0]}) cannot "
                f"import torch ({type(e).__name__}: {e}); Debian's torch is under /usr/bin/python3 "
                "(package python3-torch): name that interpreter in [job].command, or use bare "
                "\"python3\" and let nanchaos pick one that has torch (or set NANCHAOS_PYTHON)")
    # The job's own import cost, which a restart pays again (report.json restarts[].import_ms).
    log.write("imported", rank=rank, module="torch",
              import_ms=round((time.perf_counter() - t0) * 1000.0, 1))
    from .agent import Agent
    from .faults import FaultRefused
    from .plan import Plan, PlanError

    try:
        plan = Plan.load()
        _agent = Agent(plan, log, rank, world)
    except (PlanError, FaultRefused) as e:
        _refuse(log, rank, str(e))
    _patch(_agent)


def _patch(a) -> None:
    import torch
    import torch.nn.functional as F

    # The model: DDP's constructor, or the module owning the first optimizer's parameters.
    orig_opt_init = torch.optim.Optimizer.__init__

    @functools.wraps(orig_opt_init)
    def opt_init(self, *args, **kwargs):
        orig_opt_init(self, *args, **kwargs)
        if getattr(self, "_nanchaos_seen", False):
            return
        self._nanchaos_seen = True
        _wrap_step(a, self)
        a.on_optimizer(self)

    cast(Any, torch.optim.Optimizer).__init__ = opt_init

    for path in ("torch.cuda.amp.GradScaler", "torch.amp.GradScaler", "torch.cpu.amp.GradScaler"):
        cls = _resolve(path)
        if cls is None or getattr(cls.__init__, "_nanchaos_wrapped", False):
            continue
        _wrap_init(cls, a.on_scaler)

    # Losses: the functional losses (nn.*Loss modules call them) and backward() as a fallback.
    for name in LOSS_FUNCTIONS:
        orig = getattr(F, name, None)
        if orig is not None:
            setattr(F, name, _wrap_loss(a, orig))
    orig_backward = torch.autograd.backward

    @functools.wraps(orig_backward)
    def backward(tensors, *args, **kwargs):
        seq = a.before_backward(tensors)
        if seq is None:
            return orig_backward(tensors, *args, **kwargs)
        try:
            out = orig_backward(tensors, *args, **kwargs)
        except BaseException:
            a.after_backward(seq, ok=False)
            raise
        a.after_backward(seq, ok=True)
        return out

    torch.autograd.backward = backward

    if torch.distributed.is_available():
        from . import collectives

        collectives.patch_ddp(a)
        collectives.patch_distributed(a)

    # A job that spawns its own ranks is refused at the spawn, with the fix (self_spawn.py).
    from . import self_spawn

    self_spawn.patch(a)
    # Activation faults inside torch.utils.checkpoint: the forward and its recompute alike.
    from . import checkpointing

    checkpointing.patch(a)
    # The job's own checkpoints: torch.save/torch.load of training state (ckpt_io.py).
    from . import ckpt_io

    ckpt_io.patch(a)
    # ... and its torch.distributed.checkpoint save/load, when the job imports DCP (dcp_io.py).
    from . import dcp_io

    dcp_io.patch(a)
    # torch.compile: hooks run by dynamo rather than traced, inductor's compiler (compiled.py).
    from . import compiled

    compiled.patch(a)
    # torch.distributed.pipelining: one schedule.step() per iteration, targets by stage.
    from . import pipeline

    pipeline.patch(a)

    # The end: an uncaught exception, then the digests at exit.
    orig_hook = sys.excepthook

    def excepthook(exc_type, exc, tb):
        try:
            a.on_exception(exc_type, exc, tb)
        finally:
            orig_hook(exc_type, exc, tb)

    sys.excepthook = excepthook
    orig_exit = sys.exit

    @functools.wraps(orig_exit)
    def exit_(code=0):
        a.exit_code = 0 if code is None else (code if isinstance(code, int) else 1)
        orig_exit(code)

    sys.exit = exit_
    atexit.register(a.finish)


def _resolve(path: str):
    mod_path, _, attr = path.rpartition(".")
    try:
        import importlib

        return getattr(importlib.import_module(mod_path), attr, None)
    except Exception:
        return None


def _wrap_init(cls, callback) -> None:
    orig = cls.__init__

    @functools.wraps(orig)
    def init(self, *args, **kwargs):
        orig(self, *args, **kwargs)
        callback(self)

    cast(Any, init)._nanchaos_wrapped = True
    cls.__init__ = init




def _wrap_loss(a, orig):
    import torch

    per_item = orig.__name__ in ("cross_entropy", "nll_loss")

    @functools.wraps(orig)
    def loss_fn(*args, **kwargs):
        out = orig(*args, **kwargs)
        if (a._awaiting_loss and isinstance(out, torch.Tensor) and out.dim() == 0
                and torch.is_grad_enabled()):
            items = _summed_items(args, kwargs) if per_item else None
            out = a.on_loss_value(out, items)
        return out

    return loss_fn


def _summed_items(args, kwargs):
    """For ``cross_entropy``/``nll_loss(..., reduction="sum")`` (HF transformers' causal-LM loss,
    which divides by the batch's token count afterwards): the number of targets that count (not
    ``ignore_index``, default -100), as a tensor on the target's device (no host sync), so the
    recorded loss is the per-token mean the job then computes; None for a mean loss."""
    import torch

    if kwargs.get("reduction") != "sum":
        return None
    target = kwargs.get("target", args[1] if len(args) > 1 else None)
    if not isinstance(target, torch.Tensor):
        return None
    if target.is_floating_point():  # class probabilities: one item per row
        rows = max(1, target.numel() // max(1, target.shape[-1]))
        return torch.tensor(rows, device=target.device)
    return (target != kwargs.get("ignore_index", -100)).sum().clamp(min=1)


def _wrap_step(a, opt) -> None:
    """Wraps this optimizer's ``step`` (an instance attribute, so LR schedulers created later wrap
    it in turn): lr faults around the job's own step, the lr it used, and ``optimizer:`` faults
    after it. The wrapper is a bound
    method, as LR schedulers require (torch 1.13's ``with_counter`` and 2.x's
    ``patch_track_step_called`` read ``optimizer.step.__func__`` / ``__self__``)."""
    import types

    orig = opt.step

    @functools.wraps(orig)
    def step(self, *args, **kwargs):
        restore = a.before_optimizer_step(self)
        try:
            out = orig(*args, **kwargs)
        finally:
            a.after_optimizer_step(self, restore)  # also the end of the optimizer's interval
        if a._need_optimizer:
            a.on_optimizer_state(self)  # optimizer: faults, after the step wrote the state
        return out

    opt.step = types.MethodType(step, opt)
