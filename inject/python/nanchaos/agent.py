"""The agent inside an external PyTorch job: plan -> faults at their points -> evidence.

One ``Agent`` per rank process, created by the bootstrap (``nanchaos._bootstrap``) when the
harness launched the process. It never adds a check of its own: it applies the planned faults and
records what the job's stack did (steps, losses, updates or skips, the job's detections and
decisions, collectives, exceptions, digests at exit) in the event schema of
``harness/evidence/events.h``.

Attach (docs/scenario-format.md "The Python agent"): the model is the module a
``DistributedDataParallel`` wraps or else the module that owns every parameter of the first
optimizer; it is decided at the first training-mode forward of a candidate, so a job that builds
several models and then calls ``nanchaos.attach(model)`` is fine. Several candidates and no
``attach`` call fail the job at that forward with a message. A ``torch.compile``d model is
attached through its wrapper, however the job compiled it (``compiled.py``).

Step clock: every ``micro_batches`` training-mode forwards of the model with autograd enabled
make one iteration; eval-mode and ``no_grad`` forwards never count, nor does a forward of the
model nested inside one of its forwards (Lightning 2.x routes ``self(x)`` in ``training_step``
back through the DDP wrapper). A pipeline-parallel job's iterations are its ``schedule.step()``
calls instead, whatever the micro-batch count (``pipeline.py``). Iteration i's ``step_end`` is
written when iteration i+1 starts (or at exit): ``action`` is ``update`` when some parameter's
version counter moved since the iteration began (an optimizer really wrote it; PyTorch bumps
``Tensor._version`` on every in-place write) or, for ``fused=True`` optimizers, whose kernels
write without bumping it, when the optimizer's step count moved (``_fused_steps``); else ``skip``
(GradScaler's found_inf, an early ``continue``, a hand-written check: ``observed:skip``).

Cost on the clean path (measured on torch 1.13 and 2.15, bench/agent_overhead.py): a forward
pre-hook on the model, a wrapper around ``torch.nn.functional`` losses, ``torch.autograd.backward``
and the optimizer's ``step``, the job's own ``torch.distributed`` calls wrapped (and its comm hook,
when it registers one; the agent registers its own only for bucket faults), two passes over the
parameters' version counters and one host read of the loss per iteration. Module hooks only on
targeted modules; no global module hook.

Modules: the observed:* detections are ``observe.py`` (built without the plan, which reaches only
the fault modules), the attach rules ``attach_rules.py``, the activation and gradient
hooks ``fault_hooks.py``, torch.compile ``compiled.py``, pipeline parallelism's step clock
(one ``schedule.step()`` per iteration) and stages ``pipeline.py``, the ``final`` digests and DDP's
release at exit ``final.py``; the patches that call into the agent are ``_bootstrap.py`` and
``collectives.py``.

Threads: everything runs on the training thread except the comm-hook completion callbacks
(a process-group thread) and gradient hooks (the autograd thread); the event log is locked.
"""

from __future__ import annotations

import contextlib
import itertools
import operator
import os
import socket
import sys
import threading
import weakref
from typing import Any, Dict, Iterator, List, Optional

import torch

from . import faults as faults_mod
from .attach_rules import (ambiguity, model_refusal, own_type, owners_of, plain_modules,
                           strip_name, unmatched_activation, unmatched_target)
from .events import EventLog, now_us, num
from .copy_safe import CopySafeHook
from .fault_hooks import apply_activation, install_activation_hooks, install_gradient_hooks
from .final import final_fields, release_ddp, vm_hwm_kib
from .log import logger
from . import compiled, phases, pipeline, sharded
from .observe import Observer
from .plan import Plan

__all__ = ["Agent", "AttachError"]

_VERSION = operator.attrgetter("_version")  # Tensor._version: bumped by every in-place write


class AttachError(RuntimeError):
    """The agent cannot observe this job faithfully (ambiguous model, inductor without a C++
    compiler, a fault that needs what the job lacks). Raised into the job so that it fails at
    start, never runs unobserved; the reason is also in the rank's ``attach_error`` event."""


class Agent:
    """The rank's agent. Created once per process by the bootstrap; see the module docstring."""

    def __init__(self, plan: Plan, log: EventLog, rank: int, world: int) -> None:
        self.plan = plan
        self.log = log
        self.rank = rank
        self.world = world
        self.seed = plan.seed
        self.micro_batches = plan.micro_batches
        self.faults = faults_mod.make_faults(plan)  # FaultRefused for an unfaithful fault
        self.needs = set()
        for f in self.faults:
            self.needs |= set(f.needs)
        # The hot path tests these once per call (a set lookup each, every step, otherwise).
        self._need_batch = "batch" in self.needs
        self._need_step_start = "step_start" in self.needs
        self._need_parameters = "parameters" in self.needs
        self._need_loss = "loss" in self.needs
        self._need_lr = "lr" in self.needs
        self._need_optimizer = "optimizer" in self.needs  # optimizer: targets (_bootstrap's step)
        self._need_fsdp_collective = "fsdp_collective" in self.needs  # collectives.FSDP_POINTS
        # What the job built (weak: the agent must not keep a model alive).
        self._ddps: List[weakref.ref] = []
        self._optimizers: List[weakref.ref] = []
        self._scalers: List[weakref.ref] = []
        self._candidate_hooks: Dict[int, Any] = {}
        self._explicit: Optional[torch.nn.Module] = None
        self.model: Optional[torch.nn.Module] = None
        self.ddp = None
        self.optimizers: List[Any] = []
        self.scaler = None
        self.attached = False
        # Step clock and per-iteration state.
        self.step = -1
        self.micro = 0
        self._forwards = 0
        self._step_offset = 0  # the first iteration's step: a resumed checkpoint's (resume_at)
        self._model_depth = 0  # the model's forwards in progress (_track_depth)
        self._open = False
        self._params: List[torch.Tensor] = []
        self._named_params: List = []
        self._version0 = 0
        self._fused_groups: List[tuple] = []  # (optimizer state, first parameter) per fused group
        self._fused0: List[float] = []
        self._optimizer_ids: set = set()  # id() of self.optimizers, for the step wrapper
        self._losses: List[torch.Tensor] = []  # this iteration's micro-batch losses (detached)
        self._awaiting_loss = False
        self._loss_seen_micro = False
        self.observer = Observer(log)  # observed:* detections, from the log alone (observe.py)
        self._lr_used: Optional[float] = None
        self._lr_last: Optional[float] = None
        self._lr_text = "null"
        self.first_loss: Optional[float] = None
        self.last_loss: Optional[float] = None
        self.steps_done = 0
        self._bucket_in_iter = 0
        self._fsdp_calls = {"all_gather": 0, "reduce_scatter": 0}  # this iteration's, so far
        self._sync_backward = False  # the model's last forward will all-reduce in its backward
        self._ddp_backward = False  # ... and so DDP waits for its buckets at the backward's end
        # Own time per phase on step_end (phases.py); created here, on the training thread.
        self.phases = phases.PhaseClock()
        self._backward_depth = 0  # backward() calls in progress (a reentrant checkpoint nests)
        self._recomputing = False  # inside sdc_check's second run of a step (recompute())
        self._computed_ns = 0  # when the DDP backward's local gradients were all computed
        self._saves = 0  # training-state saves observed in this launch (ckpt_io.py)
        self._optimizer_timed = False
        self._grad_numel = 0
        self._grad_dtype = ""
        self._grad_allreduce_fields = '"name":"grad_allreduce","count":0,"dtype":""'
        # Collectives (a flight recorder): one sequence number per collective, in call order.
        self._coll_seq = itertools.count()  # next() is atomic under the GIL
        self._p2p_seq = itertools.count()  # sends and receives: their own sequence (collectives.py)
        self._coll_depth = threading.local()
        self._probes: set = set()
        self._module_names: List[str] = []
        self._names_checked = False
        self.exit_code = 0
        self._finished = False
        self._stack_detections: Dict[int, int] = {}
        self._sharded: Optional[sharded.ShardedModel] = None  # FSDP2 / DTensor models (sharded.py)
        self.compiled = compiled.CompileWatch(self)  # torch.compile seen, hooks kept (compiled.py)
        # Pipeline parallelism (pipeline.py): set at the first schedule.step(), which then
        # clocks the iterations instead of the stage module's per-micro-batch forwards.
        self.pipeline = pipeline.Pipeline(self)
        self._pipeline: Optional[pipeline.Pipeline] = None

    # ------------------------------------------------------------------------------------------
    # evidence
    def fired(self, fault: int, target: str, detail: Dict[str, Any],
              step: Optional[int] = None) -> None:
        """The ``inject`` event; ``step`` defaults to the iteration (a checkpoint fault gives
        the corrupted save's step, its ground truth)."""
        kind = next((f.kind for f in self.faults if f.index == fault), "")
        self.log.write("inject", fault=fault, kind=kind, step=self.step if step is None else step,
                       target=target, detail=detail, replay=False)

    def coll_enter(self, name: str, count: int = 0, dtype: str = "", bucket=None,
                   span: str = "") -> int:
        seq = next(self._coll_seq)
        extra = "" if bucket is None else f',"bucket":{bucket}'
        if span:
            extra += f',"span":"{span}"'
        self.log.write_line(
            f'{{"ev":"coll_enter","t_us":{now_us()},"seq":{seq},"name":"{name}","count":{count},'
            f'"dtype":"{dtype}","step":{self.step}{extra}}}')
        return seq

    def coll_leave(self, seq: int, name: str, status: str = "ok") -> None:
        self.log.write_line(f'{{"ev":"coll_leave","t_us":{now_us()},"seq":{seq},"name":"{name}",'
                            f'"status":"{status}"}}')

    # ------------------------------------------------------------------------------------------
    # what the job builds (called from the patched constructors)
    def on_ddp(self, ddp) -> None:
        self._ddps.append(weakref.ref(ddp))
        self._watch_candidate(compiled.unwrap(ddp.module))

    def on_optimizer(self, opt) -> None:
        self._optimizers.append(weakref.ref(opt))
        if self.attached:
            self._maybe_add_optimizer(opt)
            return
        if not self._ddps and self._explicit is None:
            for owner in owners_of(opt):
                self._watch_candidate(owner)

    def on_scaler(self, scaler) -> None:
        self._scalers.append(weakref.ref(scaler))
        if self.attached and self.scaler is None:
            self.scaler = scaler

    def explicit_attach(self, model, optimizer=None, scaler=None) -> None:
        model = compiled.unwrap(model)  # DDP's module, torch.compile's _orig_mod
        if not isinstance(model, torch.nn.Module):
            raise TypeError(f"nanchaos.attach: model must be a torch.nn.Module, got {type(model)}")
        if self.attached and model is not self.model:
            raise AttachError(
                f"nanchaos.attach({type(model).__name__}) after the agent already attached to "
                f"{type(self.model).__name__} at its first training forward: call attach before "
                "training starts")
        self._explicit = model
        if optimizer is not None and all(r() is not optimizer for r in self._optimizers):
            self._optimizers.append(weakref.ref(optimizer))
        if scaler is not None:
            self._scalers.insert(0, weakref.ref(scaler))
        self._watch_candidate(model)

    def _watch_candidate(self, module) -> None:
        if id(module) in self._candidate_hooks or self.attached:
            return
        # CopySafeHook: a deepcopy or pickle of the module (an EMA, a best-model copy) gets an
        # inert hook, never the agent (copy_safe.py).
        hook = module.register_forward_pre_hook(CopySafeHook(self._pre_forward))
        self._candidate_hooks[id(module)] = (weakref.ref(module), hook)
        # Gradient faults hook the parameters as soon as a candidate is known (fault_hooks.py).
        install_gradient_hooks(self, module)
        self.compiled.protect([module])  # after torch.compile: run by dynamo, not traced

    # ------------------------------------------------------------------------------------------
    # attach: at the first training forward of a candidate
    def _candidates(self) -> List[torch.nn.Module]:
        if self._explicit is not None:
            return [self._explicit]
        ddps = [d for d in (r() for r in self._ddps) if d is not None]
        if ddps:
            return [compiled.unwrap(d.module) for d in ddps]
        out: List[torch.nn.Module] = []
        for ref, _ in self._candidate_hooks.values():
            m = ref()
            if m is not None and all(m is not o for o in out):
                out.append(m)
        return out

    def _resolve(self, module) -> None:
        cands = self._candidates()
        why = ambiguity(cands)
        if why:
            self._fail(why)
        model = cands[0] if cands else module
        why = model_refusal(model)
        if why:
            self._fail(why)
        self.model = model
        self.attached = True
        self._track_depth(model)
        for key, (ref, handle) in list(self._candidate_hooks.items()):
            if ref() is not model:
                handle.remove()
                del self._candidate_hooks[key]
        for r in self._ddps:
            d = r()
            if d is not None and compiled.unwrap(d.module) is model:
                self.ddp = d
        try:  # FSDP2: the sharded parameters, not the unsharded ones a forward swapped in
            self._sharded = sharded.attach(self, model)
        except RuntimeError as e:
            self._fail(str(e))
        self._named_params = (self._sharded.named if self._sharded is not None else
                              [(strip_name(n), p) for n, p in model.named_parameters()])
        self._params = [p for _, p in self._named_params]
        for r in self._optimizers:
            if r() is not None:
                self._maybe_add_optimizer(r())
        if self._sharded is not None:
            self._sharded.hook_optimizers()
        self.scaler = next((r() for r in self._scalers if r() is not None), None)
        names = [n for n, _ in self._named_params]
        for f in self.faults:
            why = (f.attach_refusal(self) or unmatched_target(f, names, own_type(model))
                   or self.compiled.refusal(f, model))  # fullgraph=True regions (compiled.py)
            if why:
                self._fail(f"[[fault]] #{f.index + 1} ({f.kind}): {why}")
        self._module_names = [n for n, _ in plain_modules(model)]
        install_activation_hooks(self, model)
        self.compiled.protect([model])
        if self.ddp is not None:
            grads = [p for p in self._params if p.requires_grad]
            self._grad_numel = sum(p.numel() for p in grads)
            self._grad_dtype = str(grads[0].dtype).replace("torch.", "") if grads else ""
            self._grad_allreduce_fields = (f'"name":"grad_allreduce","count":{self._grad_numel},'
                                           f'"dtype":"{self._grad_dtype}"')
            if "bucket" in self.needs:  # bucket faults: in the comm hook (collectives.py)
                from . import collectives

                collectives.ensure_comm_hook(self, self.ddp)
        logger(self.rank).info(
            "attached to %s (%d parameters%s, optimizers: %s, scaler: %s)", own_type(model),
            len(self._named_params), ", DDP" if self.ddp is not None else "",
            ", ".join(type(o).__name__ for o in self.optimizers) or "none",
            type(self.scaler).__name__ if self.scaler is not None else "none")
        self.log.write(
            "start", rank=self.rank, world=self.world, pid=os.getpid(), host=socket.gethostname(),
            external=True, agent="python", torch=torch.__version__, python=sys.executable,
            modules=self._module_names,
            parameters=[n for n, _ in self._named_params],
            optimizer=[type(o).__name__ for o in self.optimizers],
            scaler=type(self.scaler).__name__ if self.scaler is not None else None,
            ddp=self.ddp is not None, micro_batches=self.micro_batches)

    def _track_depth(self, model) -> None:
        """Counts the model's forwards in progress, so that a forward of the model nested in
        another (Lightning 2.x's ``_ForwardRedirection`` sends the ``self(x)`` inside
        ``training_step`` back through DDP and its wrapper) is not a second micro-batch."""

        def leave(module, args, out):
            if module is self.model and self._model_depth > 0:
                self._model_depth -= 1
            return None

        try:  # torch >= 2.0: also after a forward that raised
            model.register_forward_hook(CopySafeHook(leave), always_call=True)
        except TypeError:
            model.register_forward_hook(CopySafeHook(leave))

    def _maybe_add_optimizer(self, opt) -> None:
        if any(o is opt for o in self.optimizers) or self.model is None:
            return
        mine = {id(p) for p in (self._params or self.model.parameters())}
        if any(id(p) in mine for g in opt.param_groups for p in g["params"]):
            self.optimizers.append(opt)
            self._optimizer_ids.add(id(opt))
            self._fused_groups = [(o.state, g["params"][0]) for o in self.optimizers
                                  for g in o.param_groups if g.get("fused") and g["params"]]

    def _fail(self, reason: str) -> None:
        self.log.write("attach_error", rank=self.rank, reason=reason)
        raise AttachError("nanchaos: " + reason)

    # ------------------------------------------------------------------------------------------
    # the step clock
    def _pre_forward(self, module, args):
        if module is self.model:
            depth = self._model_depth + 1
            self._model_depth = depth
            if depth > 1:
                return None  # a nested forward of the model: part of the outer one
            if self._recomputing:
                return None  # sdc_check's second run of this iteration: not a new one
            if not module.training or not torch.is_grad_enabled():
                return None
            if self._pipeline is not None:  # a micro-batch of schedule.step(): no new iteration
                self._awaiting_loss = True
                self._loss_seen_micro = False
                return None
        else:
            if not module.training or not torch.is_grad_enabled():
                return None
            if self.attached:
                return None
            self._resolve(module)
            if module is not self.model:
                return None
            self._model_depth = 1
        ddp = self.ddp
        # DDP reads require_backward_grad_sync in this forward (no_sync() clears it): the
        # backward of this forward all-reduces the gradients.
        self._ddp_backward = ddp is not None and ddp.require_backward_grad_sync
        self._sync_backward = self._ddp_backward and not getattr(ddp, "_nanchaos_hooked", False)
        self._forwards += 1
        if self._forwards == 1:
            self.phases.restart()  # before the first iteration: the job's start, no phase
        micro = (self._forwards - 1) % self.micro_batches
        if micro == 0:
            self._begin_iteration(self._step_offset + (self._forwards - 1) // self.micro_batches)
        self.micro = micro
        self._awaiting_loss = True
        self._loss_seen_micro = False
        if self._need_batch:
            new_args = args
            for f in self.faults:
                r = f.on_batch(self, tuple(new_args), {})
                if r is not None:
                    new_args = r
            self.phases.mark(phases.DATA)  # the batch fetch, and the batch faults' delay
            if new_args is not args:
                return tuple(new_args)
            return None
        self.phases.mark(phases.DATA)
        return None

    def _begin_iteration(self, i: int) -> None:
        if self.plan.dry_run and i >= self._step_offset + 1:
            if self._open:
                self._end_iteration()
            self.log.write("dry_run_done", step=i)
            self.log.close()
            os._exit(0)
        if self._open:
            self._end_iteration(next_step=i)  # writes step_begin too
        else:
            self.log.write_line(f'{{"ev":"step_begin","t_us":{now_us()},"step":{i}}}')
        self.step = i
        self._open = True
        self._bucket_in_iter = 0
        if self._need_fsdp_collective:
            self._fsdp_calls = {"all_gather": 0, "reduce_scatter": 0}
        self._lr_used = None
        if self._need_step_start:
            for f in self.faults:
                f.on_step_start(self)
        if self._need_parameters:
            for f in self.faults:
                f.on_parameters(self, self._named_params)
        self._version0 = sum(map(_VERSION, self._params))
        if self._fused_groups:
            self._fused0 = self._fused_steps()

    def _fused_steps(self) -> List[float]:
        """The optimizer's own step count (``state[p]["step"]``) of the first parameter of each
        ``fused=True`` param group: fused kernels (``torch._fused_adamw_``, HF Trainer's default
        optimizer since torch 2.8) write parameters without bumping ``Tensor._version``, so for
        them an update is a step count that moved (a skipped step - no gradients, or a
        GradScaler's found_inf, which the fused kernel takes back - leaves it). One scalar read
        per fused group per iteration (a device sync when the count lives on a GPU)."""
        return [float(state.get(first, {}).get("step", 0)) for state, first in self._fused_groups]

    def _check_activation_names(self) -> None:
        """Once, at the first optimizer step (or the end of iteration 0 when the job steps no
        optimizer the agent saw): every activation: target names a module or a probe."""
        if self._names_checked:
            return
        self._names_checked = True
        for f in self.faults:
            why = unmatched_activation(f, self._module_names, sorted(self._probes),
                                       own_type(self.model) if self.model is not None else "?")
            if why:
                self._open = False  # no step_end for an iteration the job never finishes
                self._fail(f"[[fault]] #{f.index + 1} ({f.kind}): {why}")

    def _end_iteration(self, next_step: Optional[int] = None) -> None:
        """Writes iteration ``self.step``'s ``step_end`` (and the observer's detections), then,
        when ``next_step`` is given, that iteration's ``step_begin`` at the same time: one write
        for both when the observer has nothing to add (the common case)."""
        if not self._names_checked:
            self._check_activation_names()
        self._open = False
        updated = ((self._sharded is not None and self._sharded.take_updated())  # resets it
                   or sum(map(_VERSION, self._params)) != self._version0
                   or (bool(self._fused_groups) and self._fused_steps() != self._fused0))
        loss, scale = self._read_loss_and_scale()
        if loss is not None:
            if self.first_loss is None:
                self.first_loss = loss
            self.last_loss = loss
        action = "update" if updated else "skip"
        lr = self._lr_used
        if lr is None and self.optimizers:
            lr = float(self.optimizers[0].param_groups[0].get("lr", 0.0))
        if lr != self._lr_last:  # the lr's text is kept while the lr stays (most iterations)
            self._lr_last, self._lr_text = lr, num(lr)
        t = now_us()
        own = self.phases.fields()  # resets the sums; a pipeline stage writes none (phases.py)
        if self._pipeline is not None:
            own = ""
        end = (f'{{"ev":"step_end","t_us":{t},"step":{self.step},"loss":{num(loss)},'
               f'"action":"{action}","lr":{self._lr_text}{own}}}')
        begin = "" if next_step is None else f'{{"ev":"step_begin","t_us":{t},"step":{next_step}}}'
        if updated and scale is None:  # the observer has nothing to say (observe.py)
            self.log.write_line(end + "\n" + begin if begin else end)
        else:
            if begin and not self.observer.will_report(updated, scale):
                self.log.write_line(end + "\n" + begin)
                begin = ""
            else:
                self.log.write_line(end)
            self.observer.end_iteration(self.step, updated, scale)
            if begin:
                self.log.write_line(begin)
        self.steps_done = self.step + 1

    def _scale_tensor(self) -> Optional[torch.Tensor]:
        s = self.scaler
        if s is None or not getattr(s, "_enabled", False):
            return None
        t = getattr(s, "_scale", None)
        return t if isinstance(t, torch.Tensor) else None

    def _read_loss_and_scale(self):
        """One host read per iteration: the mean loss of its micro-batches (and the loss scale,
        in the same read when it lives on the same device)."""
        losses, self._losses = self._losses, []
        if self.scaler is None and len(losses) == 1:
            return losses[0].item(), None
        scale_t = self._scale_tensor()
        if not losses:
            return None, (float(scale_t) if scale_t is not None else None)
        mean = losses[0] if len(losses) == 1 else torch.stack(
            [t.reshape(()).float() for t in losses]).mean()
        if scale_t is None:
            return float(mean), None
        if scale_t.device == mean.device:
            both = torch.stack([mean.reshape(()).float(), scale_t.reshape(()).float()]).tolist()
            return both[0], both[1]
        return float(mean), float(scale_t)

    # ------------------------------------------------------------------------------------------
    # loss, backward, optimizer step (called from the patched functions)
    def on_loss_value(self, loss: torch.Tensor, items=None) -> torch.Tensor:
        """A ``torch.nn.functional`` loss returned ``loss`` (a scalar) after a training forward;
        ``items`` (a count tensor) when it was a ``reduction="sum"`` loss: the recorded value is
        then the per-item mean."""
        if self._recomputing:
            return loss  # sdc_check's second run: its loss is not the iteration's
        self._awaiting_loss = False
        if self._need_loss and self._open:
            for f in self.faults:
                loss = f.on_loss(self, loss)
        self._record_loss(loss.detach() if items is None else loss.detach() / items)
        self._loss_seen_micro = True
        return loss

    def before_backward(self, root) -> Optional[int]:
        """``torch.autograd.backward(root, ...)`` begins (``root``: what was passed, a tensor or a
        sequence of them).

        The loss: a scalar ``root`` is recorded when no functional loss was seen this
        micro-batch (divided by an attached GradScaler's scale, which ``scaler.scale(loss)``
        multiplied in).

        The gradient all-reduce: when this is the backward of a DDP forward that syncs
        gradients and no comm hook logs the buckets (the clean path: the agent registers its hook
        only for bucket faults, since a Python comm hook costs every step ~0.1 ms of GIL round
        trips on torch 2.x, measured), the whole backward is logged as one collective:
        ``coll_enter grad_allreduce`` (``span`` "backward", ``count`` the elements of every
        gradient) now, and ``after_backward`` logs ``coll_leave`` when backward returns (DDP
        waits for every bucket's all-reduce before backward returns) or raises (status
        ``error``: a peer's timeout).

        Phase times (phases.py): an outermost backward of an open iteration ends the
        ``compute`` interval; under DDP its root gets a hook that queues an autograd final
        callback (``_gradients_computed``), which runs before DDP's own (queued once every
        bucket is ready), so the rest of the backward is the wait for the bucket all-reduces.

        Returns the collective's sequence number, -1 when this backward logs no collective but
        ends a phase, or None when ``after_backward`` need not be called."""
        if not self._open or self._backward_depth or self._recomputing:
            return None
        self._backward_depth = 1
        self.phases.mark(phases.COMPUTE)
        if self._ddp_backward:
            self._ddp_backward = False
            self._computed_ns = 0
            t = root[0] if isinstance(root, (list, tuple)) and root else root
            if isinstance(t, torch.Tensor) and t.requires_grad:
                t.register_hook(self._queue_computed)
        if not self._loss_seen_micro:
            t = root[0] if isinstance(root, (list, tuple)) and len(root) == 1 else root
            if isinstance(t, torch.Tensor) and t.dim() == 0:
                self._loss_seen_micro = True
                value = t.detach()
                scale_t = self._scale_tensor()
                if scale_t is not None and scale_t.device == value.device:
                    value = value / scale_t
                self._record_loss(value)
        if not self._sync_backward:
            return -1
        self._sync_backward = False
        seq = next(self._coll_seq)
        self.log.write_line(f'{{"ev":"coll_enter","t_us":{now_us()},"seq":{seq},'
                            f'{self._grad_allreduce_fields},"step":{self.step},"span":"backward"}}')
        return seq

    def after_backward(self, seq: int, ok: bool) -> None:
        """The backward that ``before_backward`` numbered ``seq`` returned (``ok``) or raised:
        its ``coll_leave`` (``seq`` >= 0) and the end of the ``backward`` interval."""
        if self._computed_ns:
            self.phases.wait_ns += phases.now_ns() - self._computed_ns
            self._computed_ns = 0
        self._backward_depth = 0
        self.phases.mark(phases.BACKWARD)
        if seq >= 0:
            self.log.write_line(f'{{"ev":"coll_leave","t_us":{now_us()},"seq":{seq},'
                                f'"name":"grad_allreduce","status":"{"ok" if ok else "error"}"}}')

    def _queue_computed(self, grad: torch.Tensor) -> None:
        """A hook on a DDP backward's root (it runs first): queues ``_gradients_computed``
        to run when the graph's computation ends, before DDP's final callback waits for its
        buckets (torch's ``Engine.queue_callback``, as DDP and FSDP use it; torch 1.13 and
        2.x)."""
        torch.autograd.Variable._execution_engine.queue_callback(self._gradients_computed)

    def _gradients_computed(self) -> None:
        self._computed_ns = phases.now_ns()

    def _record_loss(self, value: torch.Tensor) -> None:
        self._losses.append(value)  # no copy, no sync: read once at the iteration's end

    def before_optimizer_step(self, opt):
        """Returns the lrs to restore after the step (lr faults), or None."""
        if not self._open or id(opt) not in self._optimizer_ids:
            return None
        if not self._names_checked:
            self._check_activation_names()
        restore = None
        if self._need_lr:
            factor = 1.0
            for f in self.faults:
                factor *= f.lr_factor(self)
            if factor != 1.0:
                restore = [g["lr"] for g in opt.param_groups]
                for g in opt.param_groups:
                    g["lr"] = g["lr"] * factor
        self._lr_used = float(opt.param_groups[0].get("lr", 0.0)) if opt.param_groups else None
        self.phases.mark(phases.COMM)  # after the backward up to the optimizer step
        self._optimizer_timed = True
        return restore

    def after_optimizer_step(self, opt, restore) -> None:
        if self._optimizer_timed:
            self._optimizer_timed = False
            self.phases.mark(phases.OPTIMIZER)  # the optimizer step: no phase
        if restore is not None:
            for g, lr in zip(opt.param_groups, restore):
                g["lr"] = lr

    def on_optimizer_state(self, opt) -> None:
        """After ``opt.step()`` of an attached optimizer in an open iteration: ``optimizer:``
        faults on its per-parameter state tensors, named ``PARAM.STATE`` (``exp_avg``,
        ``exp_avg_sq``, ``momentum_buffer``, ...; the step count ``step`` is not a target). A
        ``DTensor`` state (FSDP2, tensor parallelism) is hit in this rank's local shard (element
        choice over the local shard's elements). A parameter with no state yet (its first step
        was skipped) offers nothing to hit."""
        if not self._open or id(opt) not in self._optimizer_ids:
            return
        names = {id(p): n for n, p in self._named_params}
        named = []
        for group in opt.param_groups:
            for p in group["params"]:
                name = names.get(id(p))
                state = opt.state.get(p) if name is not None else None
                for key, value in (state or {}).items():
                    if key != "step" and isinstance(value, torch.Tensor):
                        named.append((f"{name}.{key}", sharded.local(value)))
        for f in self.faults:
            f.on_optimizer_state(self, named)

    # ------------------------------------------------------------------------------------------
    # DDP buckets (from collectives.wrap_comm_hook)
    def on_bucket(self, bucket_index: int, buffer: torch.Tensor) -> None:
        first = self._bucket_in_iter
        self._bucket_in_iter += 1
        if "bucket" in self.needs and self._open:
            for f in self.faults:
                f.on_bucket(self, first, buffer)

    # ------------------------------------------------------------------------------------------
    # FSDP2's all-gathers and reduce-scatters (from collectives.patch_distributed's wrapper)
    @property
    def fsdp2(self) -> bool:
        """The attached model is sharded with FSDP2's ``fully_shard`` (FSDP's records found;
        a tensor-parallel model has DTensor parameters but none)."""
        return self._sharded is not None and bool(self._sharded.managed)

    def on_fsdp_collective(self, point: str, tensor: Optional[torch.Tensor]) -> None:
        """FSDP2 is about to enter an all-gather (``point`` "all_gather", ``tensor`` this rank's
        input: its shards packed, flat) or a reduce-scatter ("reduce_scatter", ``tensor`` this
        rank's gradient contribution: flat, world size x the output's elements). Numbered per
        iteration from 0, from the iteration's first training forward on: the root group's
        all-gather, which FSDP runs before the model's forward hooks, belongs to the iteration
        before. Calls ``on_fsdp_collective`` of every fault (comm, hang) before the rank enters."""
        if not self._open or tensor is None:
            return
        index = self._fsdp_calls[point]
        self._fsdp_calls[point] = index + 1
        for f in self.faults:
            f.on_fsdp_collective(self, point, index, tensor)

    # ------------------------------------------------------------------------------------------
    # the job's own calls
    def probe(self, name: str, tensor):
        if name not in self._probes:
            self._probes.add(name)
            self.log.write("probe", name=name, step=self.step)
        if "activation" in self.needs:  # also inside activation checkpointing (fault_hooks.py)
            hits = [f for f in self.faults if "activation" in f.needs]
            tensor = apply_activation(self, name, hits, True, tensor)
        return tensor

    # ------------------------------------------------------------------------------------------
    # the job's own checkpoints (ckpt_io.py)
    def on_checkpoint_save(self, path: str, step: Optional[int], tensors: int, obj: Any = None,
                           resave=None, fields: Optional[Dict[str, Any]] = None,
                           dcp: Any = None) -> None:
        """The job saved training state: ``ckpt_save {path, step, agent_step, tensors,
        **fields}`` (``fields``: ``format``, ``digests`` and, for DCP, the shard: ckpt_io.py,
        dcp_io.py); ``agent_step`` is the step a resume from it would run first: the open
        iteration's step + 1 (a job saves after its update; the iteration's ``step_end`` comes at
        the next forward), else the iterations completed. Then ``checkpoint`` faults on the file
        (``obj``: what was saved; ``resave(obj)``: the job's save call again; ``dcp``: this
        rank's shard of a DCP checkpoint, faults/checkpoint.py ``DcpShard``)."""
        agent_step = self.step + 1 if self._open else self.steps_done
        self.log.write("ckpt_save", path=path, step=step, agent_step=agent_step, tensors=tensors,
                       **(fields or {}))
        self._saves += 1
        if "checkpoint" in self.needs:
            from .faults.checkpoint import SavedCheckpoint

            saved = SavedCheckpoint(path, agent_step if step is None else step, self._saves, obj,
                                    resave, dcp)
            for f in self.faults:
                f.on_checkpoint_saved(self, saved)

    def on_checkpoint_rename(self, src: str, dst: str) -> bool:
        """The job renames ``src``, a file it saved, to ``dst`` (absolute paths). False when a
        ``checkpoint`` fault deleted ``src``: the rename must then leave no file at ``dst``."""
        if any(f.deleted(src) for f in self.faults):
            return False
        for f in self.faults:
            f.on_checkpoint_renamed(self, src, dst)
        return True

    def on_checkpoint_load(self, path: str, step: Optional[int], tensors: int,
                           fields: Optional[Dict[str, Any]] = None) -> None:
        """The job loaded training state: ``ckpt_load {path, step, tensors, **fields}``, and,
        before the first iteration, ``resume_at(step)``."""
        self.log.write("ckpt_load", path=path, step=step, tensors=tensors, **(fields or {}))
        if step is not None:
            self.resume_at(step)

    def on_checkpoint_reject(self, path: str, why: str,
                             fields: Optional[Dict[str, Any]] = None) -> None:
        """The job's load of the checkpoint at ``path`` raised (a DCP load of a truncated or
        missing shard, dcp_io.py): ``ckpt_reject {path, step: null, why, **fields}``, the event a
        built-in loader writes for a checkpoint it refused; the judge lists it among the launch's
        rejected checkpoints."""
        self.log.write("ckpt_reject", path=path, step=None, why=why[:500], **(fields or {}))

    def resume_at(self, step: int) -> None:
        """Numbers the first iteration ``step`` (steps, 0-based): a job that resumed from a
        checkpoint at that step runs it first. No effect once an iteration began (pipeline jobs
        count their ``schedule.step()`` calls from 0 and are not renumbered)."""
        if self._forwards == 0 and self.step < 0 and step >= 0:
            self._step_offset = int(step)
            self.steps_done = int(step)

    def sdc_target(self) -> tuple:
        """(the model ``nanchaos.sdc_check`` compares, its DDP wrapper or None): the attached
        model, or before the first training forward the only candidate (the one DDP wrapper's
        module, ``nanchaos.attach``'s model); (None, None) when there is none or several."""
        if self.attached:
            return self.model, self.ddp
        cands = self._candidates()
        if len(cands) != 1:
            return None, None
        ddps = [d for d in (r() for r in self._ddps)
                if d is not None and compiled.unwrap(d.module) is cands[0]]
        return cands[0], (ddps[0] if ddps else None)

    @contextlib.contextmanager
    def recompute(self) -> Iterator[None]:
        """``nanchaos.sdc_check``'s second run of the current iteration (sdc.py): its forwards
        start no iteration and apply no batch fault, its loss is not recorded and its backward
        logs no collective and no phase. A fault already applied at this step does not fire
        again (``Fault._once``: one hit per step and target); a fault first reached here does."""
        self._recomputing = True
        try:
            yield
        finally:
            self._recomputing = False

    def report_detection(self, detector: str, layer=None, cause=None, step=None) -> None:
        st = self.step if step is None else int(step)
        self.log.write("detect", detector=str(detector), step=st, layer=layer or "",
                       cause=cause or "", source="stack")

    def report_decision(self, action: str, step=None) -> None:
        st = self.step if step is None else int(step)
        self.log.write("decision", step=st, action=str(action), source="stack")
        if action == "abort":
            self.log.write("abort", step=st, reason="the job's stack decided to abort", cause="",
                           source="stack")

    # ------------------------------------------------------------------------------------------
    # the end
    def on_exception(self, exc_type, exc, tb) -> None:
        self.exit_code = 1
        msg = f"{exc_type.__name__}: {exc}"[:2000]
        self.log.write("exception", type=exc_type.__name__, message=msg, step=self.step)
        self.observer.exception(self.step, msg)

    def finish(self) -> None:
        """atexit: the last iteration's step_end, and on a clean exit the digests (``final``)."""
        if self._finished:
            return
        self._finished = True
        try:
            if self._open and self.exit_code == 0:
                self._end_iteration()
            if self.attached and self.exit_code == 0:
                self._write_final()
            elif self._sharded is not None:  # replicas waiting for our digests stop (sharded.py)
                self._sharded.withdraw()
        finally:
            self.log.write("exit", code=self.exit_code, vm_hwm_kib=vm_hwm_kib())
            self.log.close()
            ddp, self.ddp = self.ddp, None
            if ddp is not None:
                release_ddp(ddp)  # final.py: why, before interpreter shutdown

    def _write_final(self) -> None:
        if self._pipeline is not None:  # a stage's own parameters (pipeline.py)
            self.log.write("final", **self._pipeline.final_fields(
                self._params, self.optimizers, self.steps_done, self.first_loss, self.last_loss,
                self._scale_tensor()))
            return
        if self._sharded is not None:  # digests of sharded state (sharded.py)
            self.log.write("final", **self._sharded.final_fields(
                self.optimizers, self.steps_done, self.first_loss, self.last_loss,
                self._scale_tensor()))
            return
        self.log.write("final", **final_fields(self._params, self.optimizers, self.steps_done,
                                               self.first_loss, self.last_loss,
                                               self._scale_tensor()))
