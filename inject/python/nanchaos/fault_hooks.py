"""Where ``activation`` and ``gradient`` faults meet the job's tensors: module and tensor hooks.

Only targeted modules and parameters get a hook (no global module hook). Each hook calls the
matching faults' ``on_activation(agent, name, out)`` / ``on_gradient(agent, name, grad)`` in plan
order and hands PyTorch the last fault's result, or None (PyTorch's "unchanged") when no fault
replaced the tensor, so a clean iteration costs one Python call and no copy.

* Activation hooks are ``register_forward_hook``s on the attached model's modules whose plain
  name (``attach_rules.plain_modules``: wrappers stripped, the innermost of a wrapper chain)
  matches a target; they act only inside an open iteration, on training-mode forwards with
  autograd enabled (the same forwards the step clock counts), and inside activation
  checkpointing in the forward and, replayed identically, in the recompute
  (``apply_activation``, checkpointing.py). ``out`` is whatever the module returned (any shape,
  floating dtype, or a structure a fault knows).
* Gradient hooks are ``Tensor.register_hook``s on matching parameters, installed as soon as a
  candidate model is known (DDP's or the optimizer's constructor): tensor hooks run in
  registration order, and a stack that checks each rank's local gradient in hooks of its own
  must see the fault. ``grad`` has the parameter's shape and dtype; the hook acts on the last
  micro-batch of an iteration only, and only when its candidate became the model.

Every hook is a ``copy_safe.CopySafeHook``: a ``copy.deepcopy`` or pickle of the model (an EMA,
a best-model copy, ``torch.save(model)``) holds inert ones, so a fault never lands in a copy.

Threads: activation hooks run on the training thread, gradient hooks on the autograd thread.
"""

from __future__ import annotations

import weakref
from typing import Any, Callable, List

import torch

from . import checkpointing, sharded
from . import faults as faults_mod
from .faults.base import first_tensor, replace_first
from .attach_rules import plain_modules, strip_name
from .copy_safe import CopySafeHook


def install_gradient_hooks(agent: Any, module: torch.nn.Module) -> None:
    """Hooks every parameter of the candidate ``module`` that a gradient fault targets."""
    grads = [f for f in agent.faults if "gradient" in f.needs]
    for name, p in module.named_parameters():
        name = strip_name(name)
        hits = [f for f in grads if faults_mod.match_target(f.pattern, name)]
        if hits and p.requires_grad:
            p.register_hook(CopySafeHook(_gradient_hook(agent, module, name, hits)))


def install_activation_hooks(agent: Any, model: torch.nn.Module) -> None:
    """Hooks every module of the attached ``model`` that an activation fault targets."""
    act = [f for f in agent.faults if "activation" in f.needs]
    if act:
        for name, mod in plain_modules(model):
            hits = [f for f in act if faults_mod.match_target(f.pattern, name)]
            if hits:
                mod.register_forward_hook(CopySafeHook(_activation_hook(agent, name, hits)))


def apply_activation(agent: Any, name: str, faults: List, training: bool, out: Any) -> Any:
    """``out`` after the activation ``faults`` that target ``name`` (a module's output or a probe's
    tensor): the faults' result, or ``out`` itself when none changed it.

    Outside activation checkpointing the faults act inside an open iteration on training-mode
    forwards with autograd enabled (the forwards the step clock counts). Inside a checkpointed
    function (checkpointing.py) the forward run acts the same way whatever its grad mode
    (reentrant checkpoint runs it under ``no_grad``) and records what it changed; a recompute
    replays exactly that, at the forward's step, so the recomputed values are the forward's."""
    region = checkpointing.current()
    if region is None:
        if not agent._open or not training or not torch.is_grad_enabled():
            return out
        for f in faults:
            out = f.on_activation(agent, name, out)
        return out
    key = (name, region.ordinal(name))
    if region.runs == 1:  # the forward
        if not region.live or not agent._open or not training:
            return out
        changed = []
        for f in faults:
            new = f.on_activation(agent, name, out)
            if new is not out:
                changed.append(f)
                out = new
        if changed:
            region.hits[key] = changed
        return out
    replayed = region.hits.get(key)
    if replayed:
        ctx = checkpointing.Replay(agent, region.step)
        for f in replayed:
            out = f.on_activation(ctx, name, out)
    return out


def _activation_hook(agent: Any, name: str, hits: List) -> Callable:
    def hook(module, inputs, out):
        first = first_tensor(out)
        if first is not None and sharded.is_dtensor(first):  # TP: this rank's local output
            new_first = sharded.on_local(
                first, lambda t: apply_activation(agent, name, hits, module.training, t))
            return None if new_first is first else replace_first(out, new_first)
        new = apply_activation(agent, name, hits, module.training, out)
        return None if new is out else new

    return hook


def _gradient_hook(agent: Any, module: torch.nn.Module, name: str, hits: List) -> Callable:
    owner = weakref.ref(module)

    def hook(grad):
        if not agent._open or agent.micro != agent.micro_batches - 1:
            return None
        if agent.model is not owner():
            return None  # a candidate that was not chosen
        new = sharded.on_local(grad, lambda g: _chain_gradient(agent, name, hits, g))
        return None if new is grad else new

    return hook


def _chain_gradient(agent: Any, name: str, hits: List, grad: torch.Tensor) -> torch.Tensor:
    new = grad
    for f in hits:
        new = f.on_gradient(agent, name, new)
    return new
