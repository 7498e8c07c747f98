"""``nanchaos.sdc_check(fn)``: the job-side recompute check for finite silent data corruption.

The built-in jobs' ``sdc`` detector (detectors/sdc.cpp) recomputes a step's forward and backward
on the same batch before the gradient all-reduce and compares the local gradients bit for bit.
The agent cannot do that in an external job without changing it: only the job knows how to run
its step again (its batch, its loss, its micro-batches), and re-running it behind the job's back
would run the job's own collectives twice. So this check is the one part of nanchaos that needs a
code change (docs/external-jobs.md "Finite SDC: nanchaos.sdc_check"): the job wraps its forward
and backward in a closure and calls ``sdc_check(closure)`` instead of ``closure()`` on the steps it
wants checked (every rank, the same steps).

What it does, in order:

1. runs ``fn()`` once, as the job would (under DDP the backward all-reduces as usual: the step's
   gradients are exactly the job's), while tensor hooks capture every parameter's *local*
   gradient (before DDP copies it into its bucket, after the agent's gradient faults) and forward
   hooks the float64 sum of every submodule's floating-point output;
2. puts back the buffers (BatchNorm statistics) and the RNG states (CPU, and CUDA's when
   initialized: dropout) that the first run began from, and runs ``fn()`` again with the
   gradients detached from the step's (``p.grad = None``) and, under DDP, inside ``no_sync()`` (no
   second all-reduce; DDP still broadcasts buffers at the forward, which every rank does alike);
   under the agent the second run is not a new iteration, writes no loss, and a fault already
   applied at this step does not fire again (the agent's once-per-step rule);
3. compares the two runs bit for bit (each tensor read as integers of its width): the first module
   whose output sum differs (forward order) gives cause ``activation``, else the first parameter
   whose local gradient differs (the order the backward produced them) gives cause ``gradient``;
4. restores the first run's gradients, buffers and RNG states: the job continues exactly as if it
   had called ``fn()`` once.

Under the harness it writes ``recompute_check {step, us, match}`` and, on a mismatch, the rank's
``detect`` (detector ``sdc``, the layer and cause above) through ``report_detection``. Outside
the harness it runs the same check and only returns the result.

Caveats: the comparison needs reproducible kernels: CPU kernels at a fixed thread count are; on
CUDA call ``torch.use_deterministic_algorithms(True)`` (and set ``CUBLAS_WORKSPACE_CONFIG``), else
``sdc_check`` raises ``SdcNotDeterministic`` rather than report noise. A fault that fires
identically on both runs (a persistent one) computes the same wrong values twice and is not seen.
``fn`` must compute the gradients of one batch from scratch (no optimizer step, no
``zero_grad`` of its own between the calls is needed: the helper detaches them) and must be
callable twice with the same result. Checked on torch 1.13 (CPU, gloo).
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch

from . import _bootstrap


class SdcNotDeterministic(RuntimeError):
    """``sdc_check`` on CUDA without ``torch.use_deterministic_algorithms(True)``: two runs of the
    same step may differ in their last bits without any fault, so the check refuses to run."""


@dataclass(frozen=True)
class SdcMismatch:
    """Where the two runs of the step first differed.

    ``layer``: a module name (cause ``activation``) or a parameter name (cause ``gradient``), as
    ``nanchaos targets`` spells them (no DDP ``module.`` prefix). ``cause``: ``"activation"`` or
    ``"gradient"``."""

    layer: str
    cause: str


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bitwise equality: -0.0 differs from 0.0, a NaN equals only the same NaN bits."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.numel() == 0:
        return True
    ints = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
    width = a.element_size()
    if width not in ints:  # complex types: compare as bytes
        return bool(torch.equal(a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8)))
    return bool(torch.equal(a.contiguous().view(ints[width]), b.contiguous().view(ints[width])))


def _output_sum(out: Any) -> Optional[torch.Tensor]:
    """float64 sum of a module output's floating-point tensors (a tensor, or a tuple/list whose
    tensors are summed in order); None when it holds none."""
    if isinstance(out, torch.Tensor):
        return out.detach().double().sum() if out.is_floating_point() else None
    if isinstance(out, (tuple, list)):
        sums = [s for s in (_output_sum(o) for o in out) if s is not None]
        return torch.stack(sums).sum() if sums else None
    return None


class _Recorder:
    """One run's local gradients (backward order) and module output sums (forward order)."""

    def __init__(self, named_params: Sequence[Tuple[str, torch.Tensor]],
                 named_modules: Sequence[Tuple[str, torch.nn.Module]]) -> None:
        self.grads: Dict[str, torch.Tensor] = {}  # insertion order = the order the backward made
        self.sums: List[Tuple[str, torch.Tensor]] = []
        self._handles: List[Any] = []
        for name, p in named_params:
            self._handles.append(p.register_hook(self._grad_hook(name)))
        for name, m in named_modules:
            self._handles.append(m.register_forward_hook(self._forward_hook(name)))

    def _grad_hook(self, name: str) -> Callable:
        def hook(grad: torch.Tensor) -> None:
            g = grad.detach()
            # A parameter used twice in the graph gets its gradient in parts: their sum.
            self.grads[name] = g.clone() if name not in self.grads else self.grads[name] + g
        return hook

    def _forward_hook(self, name: str) -> Callable:
        def hook(module, inputs, out) -> None:
            s = _output_sum(out)
            if s is not None:
                self.sums.append((name, s))
        return hook

    def remove(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []


def _rng_state(cuda: bool) -> Tuple[torch.Tensor, Optional[List[torch.Tensor]]]:
    return torch.get_rng_state(), (torch.cuda.get_rng_state_all() if cuda else None)


def _set_rng_state(st: Tuple[torch.Tensor, Optional[List[torch.Tensor]]]) -> None:
    torch.set_rng_state(st[0])
    if st[1] is not None:
        torch.cuda.set_rng_state_all(st[1])


def _compare(first: _Recorder, again: _Recorder) -> Optional[SdcMismatch]:
    # The forward first: a module output that differs explains every gradient after it.
    for i, (name, s) in enumerate(first.sums):
        if i >= len(again.sums) or again.sums[i][0] != name:
            return SdcMismatch(name, "activation")  # the recompute's forward went elsewhere
        if not _same_bits(s, again.sums[i][1]):
            return SdcMismatch(name, "activation")
    for name, g in first.grads.items():
        other = again.grads.get(name)
        if other is None or not _same_bits(g, other):
            return SdcMismatch(name, "gradient")
    for name in again.grads:
        if name not in first.grads:
            return SdcMismatch(name, "gradient")
    return None


def _resolve(model: Optional[torch.nn.Module], agent: Any) -> Tuple[torch.nn.Module, Any]:
    """(the plain model, its DDP wrapper or None)."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    if isinstance(model, DDP):
        return model.module, model
    target, ddp = agent.sdc_target() if agent is not None else (None, None)
    if model is None:
        if target is None:
            raise ValueError("nanchaos.sdc_check: pass model= (outside the harness, or the agent "
                             "cannot tell which model the job trains)")
        return target, ddp
    return model, (ddp if target is model else None)


def sdc_check(fn: Callable[[], Any], model: Optional[torch.nn.Module] = None
              ) -> Optional[SdcMismatch]:
    """Runs ``fn`` (the step's forward and backward on one batch) twice and compares the local
    gradients bit for bit; see the module docstring for the exact procedure.

    ``model``: the ``torch.nn.Module`` (plain or DDP-wrapped) whose parameters' gradients and
    modules' outputs are compared; default: the model the agent attached to. Returns None when
    the two runs agree, else an ``SdcMismatch`` (also reported as the rank's ``sdc`` detection
    under the harness). ``fn``'s return value is discarded. Raises ``SdcNotDeterministic`` on
    CUDA without deterministic algorithms, ``ValueError`` without a model or for a sharded one
    (FSDP, DTensor parameters)."""
    agent = _bootstrap.agent()
    plain, ddp = _resolve(model, agent)
    params = [(n, p) for n, p in plain.named_parameters() if p.requires_grad]
    if "FullyShardedDataParallel" in type(plain).__name__ or any(
            type(p).__name__ == "DTensor" for _, p in params):
        raise ValueError("nanchaos.sdc_check: sharded models (FSDP, DTensor) are not supported: "
                         "their local gradients are shards reduced inside the backward")
    on_cuda = any(p.is_cuda for _, p in params)
    if on_cuda and not torch.are_deterministic_algorithms_enabled():
        raise SdcNotDeterministic(
            "nanchaos.sdc_check: the model is on CUDA and torch.use_deterministic_algorithms(True) "
            "is off: two runs of one step may differ without a fault")
    modules = [(n, m) for n, m in plain.named_modules() if n]
    buffers = [b for b in plain.buffers()]
    t0 = time.monotonic_ns()
    cuda_rng = on_cuda and torch.cuda.is_initialized()
    rng0 = _rng_state(cuda_rng)
    buffers0 = [b.detach().clone() for b in buffers]

    first = _Recorder(params, modules)
    try:
        fn()
    finally:
        first.remove()
    grads1 = [p.grad for _, p in params]
    buffers1 = [b.detach().clone() for b in buffers]
    rng1 = _rng_state(cuda_rng)

    with torch.no_grad():
        for b, saved in zip(buffers, buffers0):
            b.copy_(saved)
    _set_rng_state(rng0)
    for _, p in params:
        p.grad = None
    again = _Recorder(params, modules)
    recompute = agent.recompute() if agent is not None else contextlib.nullcontext()
    no_sync = ddp.no_sync() if ddp is not None else contextlib.nullcontext()
    try:
        with recompute, no_sync:
            fn()
    finally:
        again.remove()
        for (_, p), g in zip(params, grads1):
            p.grad = g
        with torch.no_grad():
            for b, saved in zip(buffers, buffers1):
                b.copy_(saved)
        _set_rng_state(rng1)

    mismatch = _compare(first, again)
    if agent is not None:
        agent.log.write("recompute_check", step=agent.step,
                        us=(time.monotonic_ns() - t0) // 1000, match=mismatch is None)
        if mismatch is not None:
            agent.report_detection("sdc", layer=mismatch.layer, cause=mismatch.cause)
    return mismatch
