"""Sharded models (FSDP2's ``fully_shard``, DTensor parameters): what the agent needs to see them.

The agent attaches to an FSDP2 model as to any other (its own FQNs, the module that owns the
optimizer's parameters); ``attach`` returns a ``ShardedModel`` when the model has DTensor
parameters (None otherwise: a DDP or plain job pays nothing). Facts it relies on, checked on
torch 2.15 (CPU, gloo):

- ``fully_shard`` keeps the FQNs; every parameter becomes a ``DTensor`` ``Shard(0)`` over the
  1-D mesh of the world (``p._local_tensor`` / ``p.to_local()``: this rank's contiguous chunk of
  rows, ``torch.chunk`` sizes: the last ranks may hold fewer rows or none).
- In a forward, an FSDP group's module attributes are swapped for the *unsharded* plain
  parameters (FSDP's pre-forward hook, prepended, runs before the agent's), so
  ``model.named_parameters()`` seen from the agent's attach (the model's first training
  forward) mixes the root group's unsharded parameters with the blocks' sharded ones. The
  sharded parameter of each is read from FSDP's own records (``FSDPParam.sharded_param`` of
  every ``FSDPModule``'s param groups, ``_module_info`` naming its module and attribute: private
  API, read as torch 2.15 has it; its absence is an attach error, not a silent fallback).
- An optimizer writing DTensor parameters does not reliably bump a version counter: the
  for-loop AdamW bumps the DTensor's ``_version`` (never its local tensor's), the ``foreach`` and
  ``fused`` paths bump neither. An update is therefore read off the optimizer
  (``take_updated``): a step that found some parameter with a gradient wrote it; for optimizers
  that count steps (``state[p]["step"]``: Adam, AdamW, ...) the count must also have moved
  (a fused step that GradScaler's found_inf took back leaves it).
- ``register_hook`` on a sharded DTensor parameter never fires (silently); a hook on the
  unsharded parameter (the same object every step) fires with this rank's full local gradient
  before the reduce-scatter: ``gradient:`` faults are hooked there, from a forward pre-hook of
  the FSDP module that holds the parameter (after FSDP's, which swapped it in).

DTensor tensor parallelism (``parallelize_module``: ``ColwiseParallel`` weights ``Shard(0)``,
``RowwiseParallel`` ``Shard(1)``, ``SequenceParallel`` ``Replicate()``, the rest plain; FQNs
kept; checked on torch 2.15, gloo) is the same view without FSDP's records: the parameters are
the DTensors the module computes with, so a ``Tensor.register_hook`` on one fires with its
DTensor gradient (``fault_hooks`` hands the faults its local tensor through ``on_local``), a
module's output may be a DTensor (``SequenceParallel``: ``on_local`` again) or an
``AsyncCollectiveTensor`` (a row-wise linear's reduction in flight: the fault's out-of-place
``torch.where`` waits for it and yields a plain tensor in the graph), and DTensor's
redistributions go through the functional collectives, which ``attach`` has the flight
recorder wrap (``collectives.patch_functional``).

2-D meshes (FSDP2 x TP: ``parallelize_module`` over ``mesh["tp"]``, then ``fully_shard`` over
``mesh["dp"]``; HSDP: ``fully_shard`` over a ``(replicate, shard)`` mesh; checked on torch
2.15, gloo, 4 ranks): a parameter is a DTensor on the 2-D mesh, FSDP's shard of its TP-local
tensor (``_StridedShard`` or ``Shard`` on ``dp``, TP's placement on ``tp``); ``p.to_local()`` is
the global rank's own part. FSDP's unsharded parameter is then TP's DTensor, not a plain tensor,
so FSDP's records (not the type) tell the optimizer's parameter from the one a forward swapped
in. Targets and ``ranks`` mean the same as on one dimension, ``rank`` being the global rank.

Faults: ``parameter:`` faults write this rank's local shard (element choice over the local
shard's elements). A group whose all-gather already ran for this iteration (the root group:
FSDP gathers it before the agent's pre-forward hook) also gets the same rows of its unsharded
copy written, so this rank computes with the corrupted shard in the iteration the fault names,
as it would had the shard been corrupted before the all-gather; the other ranks see it from the
next all-gather on. ``final`` (``final_fields``): a sharded model's ``params_hash`` digests what
must be equal on every rank for sharded state to be consistent (the contract's rule): every
replicated parameter's bytes, and for each sharded one its name and whether its local shard is
finite; ``optim_hash`` every optimizer's step counts and the state of replicated parameters.
The local shards' own digests are ``local_params_hash`` / ``local_optim_hash``. A local
tensor that other ranks hold too (``replica_ranks``: HSDP's replicas, a 2-D job's parameters
replicated over ``tp``) must equal theirs: the ranks compare their digests of it (and of its
optimizer state) through the job's c10d store at exit (``ReplicaExchange``, no collective), and
``params_hash`` adds, per such parameter, whether every replica agreed (``replicas_equal``:
all did), so a diverged replica makes the ranks' ``params_hash`` differ.

Threads: attach, the parameter faults and ``final`` on the training thread; gradient hooks on
the autograd thread; the optimizer hooks in the job's ``optimizer.step()``.
"""

from __future__ import annotations

import json
import math
import time
import weakref
from datetime import timedelta
from typing import Any, Dict, List, Optional, Tuple

import torch

from . import faults as faults_mod
from .attach_rules import strip_name
from .copy_safe import CopySafeHook
from .final import digest
from .target import parse_target


def is_dtensor(t: Any) -> bool:
    """A ``torch.distributed.tensor.DTensor`` (duck-typed: no import of torch.distributed.tensor,
    which a DDP job never loads)."""
    return isinstance(t, torch.Tensor) and hasattr(t, "_local_tensor") and hasattr(t, "placements")


def local(t: Any) -> torch.Tensor:
    """This rank's local tensor of a DTensor (the storage its writes go to), else ``t``."""
    return t._local_tensor if is_dtensor(t) else t


def on_local(t: Any, fn) -> Any:
    """``fn(x) -> x'`` applied where a fault must act on this rank only: on ``t`` itself, or for
    a ``DTensor`` on its local tensor, the result rewrapped with ``t``'s mesh, placements, global
    shape and stride (``DTensor.from_local(..., run_check=False)``: no collective, differentiable,
    so autograd still reaches the module's own output). Returns ``t`` itself when ``fn`` returned
    its argument unchanged (a clean iteration costs ``to_local``'s view). Why: a fault's element
    edit on a DTensor (``view(-1)``, ``.to("cpu")``) would redistribute it, a collective that
    only the faulted rank enters (a hang, seen on torch 2.15 gloo), and would index the global
    tensor rather than this rank's shard."""
    if not is_dtensor(t):
        return fn(t)
    loc = t.to_local()  # differentiable (``_local_tensor`` would cut the autograd graph)
    new = fn(loc)
    if new is loc:
        return t
    return type(t).from_local(new, t.device_mesh, t.placements, run_check=False,
                              shape=t.shape, stride=t.stride())


def _is_sharded(t: Any) -> bool:
    """A DTensor sharded on some mesh dimension: ``Shard`` or FSDP2-over-TP's ``_StridedShard``
    (whose ``is_shard()`` is False on torch 2.15, hence the name test)."""
    return is_dtensor(t) and any(p.is_shard() or type(p).__name__.endswith("Shard")
                                 for p in t.placements)


def replica_ranks(t: Any) -> List[int]:
    """The global ranks that hold a copy of this rank's local tensor of DTensor ``t``: those
    whose coordinates equal this rank's on every mesh dimension where ``t`` is sharded (or
    partial) and take any value where it is ``Replicate()`` (HSDP's replicate dimension) or
    where ``t`` does not live: a DTensor on a named submesh (``mesh["dp"]``: FSDP2 of a
    parameter that a 2-D job's TP plan left plain) is replicated over its root mesh's other
    dimensions (``DeviceMesh._get_root_mesh()``, private, torch 2.15). This rank included,
    ascending; ``[]`` when ``t`` is not a DTensor, this rank is not in the mesh, or no such
    dimension has more than one rank (each local tensor is then held once)."""
    if not is_dtensor(t):
        return []
    mesh = t.device_mesh
    root = mesh._get_root_mesh() if hasattr(mesh, "_get_root_mesh") else mesh
    names, root_names = mesh.mesh_dim_names, root.mesh_dim_names
    if root is mesh or not names or not root_names or not set(names) <= set(root_names):
        root, root_names = mesh, names or tuple(str(d) for d in range(mesh.ndim))
        names = root_names
    placement = dict(zip(names, t.placements))
    coord = root.get_coordinate()
    ranks = root.mesh
    if coord is None:
        return []
    index = tuple(coord[d] if n in placement and not placement[n].is_replicate() else slice(None)
                  for d, n in enumerate(root_names))
    held = ranks[index].reshape(-1)
    return sorted(int(r) for r in held.tolist()) if held.numel() > 1 else []


def fsdp_params(model: torch.nn.Module) -> Dict[Tuple[int, str], Any]:
    """``(id(module), attribute) -> FSDPParam`` for every parameter FSDP2 manages in ``model``
    (``{}`` when it manages none). Raises ``RuntimeError`` naming what is missing when an
    ``FSDPModule`` lacks the records this module reads (a torch whose FSDP2 internals moved)."""
    out: Dict[Tuple[int, str], Any] = {}
    for mod in model.modules():
        get_state = getattr(mod, "_get_fsdp_state", None)
        if get_state is None:
            continue
        state = get_state()
        groups = getattr(state, "_fsdp_param_groups", None)
        if groups is None:  # torch < 2.9: one group per state
            group = getattr(state, "_fsdp_param_group", None)
            groups = [group] if group is not None else []
        for group in groups:
            for fp in getattr(group, "fsdp_params", None) or []:
                info = getattr(fp, "_module_info", None)
                if info is None or not hasattr(fp, "sharded_param"):
                    raise RuntimeError(
                        f"FSDP2 on torch {torch.__version__}: FSDPParam has no _module_info / "
                        "sharded_param; the agent cannot find the sharded parameters")
                out[(id(info.module), info.param_name)] = fp
                for m, n in zip(info.shared_modules, info.shared_param_names):
                    out[(id(m), n)] = fp
    return out


def _owner(model: torch.nn.Module, name: str) -> Tuple[torch.nn.Module, str]:
    path, _, attr = name.rpartition(".")
    return (model.get_submodule(path) if path else model), attr


def named_parameters(model: torch.nn.Module,
                     managed: Dict[Tuple[int, str], Any]) -> List[Tuple[str, torch.Tensor]]:
    """``model.named_parameters()`` (raw names) with FSDP's sharded parameter in place of an
    unsharded one that a forward swapped in: the parameters the optimizer holds. (Under
    FSDP2 x TP the unsharded parameter is itself a DTensor, on the TP mesh: FSDP's records, not
    the type, tell the two apart.)"""
    out: List[Tuple[str, torch.Tensor]] = []
    for name, p in model.named_parameters():
        if managed:
            mod, attr = _owner(model, name)
            fp = managed.get((id(mod), attr))
            if fp is not None:
                p = fp.sharded_param
        out.append((name, p))
    return out


def _chain(agent: Any, name: str, hits: List, grad: torch.Tensor) -> torch.Tensor:
    for f in hits:
        grad = f.on_gradient(agent, name, grad)
    return grad


class _Recorder:
    """A fault context that is the agent, except that ``fired`` also notes the target."""

    def __init__(self, agent: Any) -> None:
        self._agent = agent
        self.hit: List[str] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._agent, name)

    def fired(self, fault: int, target: str, detail: Dict[str, Any],
              step: Optional[int] = None) -> None:
        self.hit.append(target)
        self._agent.fired(fault, target, detail, step=step)


class ShardedModel:
    """The agent's view of a model with DTensor parameters (one per attached model)."""

    def __init__(self, agent: Any, model: torch.nn.Module,
                 managed: Dict[Tuple[int, str], Any]) -> None:
        self.agent = agent
        self.model_ref = weakref.ref(model)
        self.managed = managed
        self.named = [(strip_name(n), p) for n, p in named_parameters(model, managed)]
        self._raw = {strip_name(n): n for n, _ in model.named_parameters()}
        self._by_name: Dict[str, Any] = dict(self.named)  # DTensors (duck-typed)
        self._hooked = False
        self._probe: Dict[int, Optional[tuple]] = {}
        self._wrote = False
        self._grad_hooked: set = set()
        self.exchange: Optional[ReplicaExchange] = None  # set by ``attach``

    # --- updates ------------------------------------------------------------------------------
    def hook_optimizers(self) -> None:
        """Global optimizer step hooks (``torch.optim.optimizer.register_optimizer_step_pre_hook``
        and ``..._post_hook``, torch >= 2.0), once: they see every optimizer the agent attaches,
        also one created after the model's first forward, and ignore the others."""
        if self._hooked:
            return
        self._hooked = True
        from torch.optim import optimizer as optim_mod

        optim_mod.register_optimizer_step_pre_hook(self._before_step)
        optim_mod.register_optimizer_step_post_hook(self._after_step)

    def _mine(self, opt) -> bool:
        return any(o is opt for o in self.agent.optimizers)

    @staticmethod
    def _step_count(opt, p) -> Optional[float]:
        step = opt.state.get(p, {}).get("step") if p in opt.state else None
        return None if step is None else float(step)

    def _before_step(self, opt, args, kwargs) -> None:
        if not self._mine(opt):
            return None
        first = next((p for g in opt.param_groups for p in g["params"] if p.grad is not None),
                     None)
        self._probe[id(opt)] = None if first is None else (first, self._step_count(opt, first))

    def _after_step(self, opt, args, kwargs) -> None:
        probe = self._probe.pop(id(opt), None)
        if probe is None:
            return  # no parameter had a gradient: the optimizer wrote nothing
        p, before = probe
        after = self._step_count(opt, p)
        if after is None or after != before:
            self._wrote = True

    def take_updated(self) -> bool:
        """Whether an optimizer of the model wrote its parameters since the last call."""
        wrote, self._wrote = self._wrote, False
        return wrote

    # --- parameter faults ---------------------------------------------------------------------
    def wrap_parameter_faults(self) -> None:
        """Each ``parameter:`` fault acts on the local shards (and mirrors what it wrote into an
        unsharded copy in use this iteration, see the module docstring)."""
        for f in self.agent.faults:
            if "parameters" not in f.needs:
                continue
            orig = f.on_parameters

            def on_parameters(ctx, named, _orig=orig):
                rec = _Recorder(ctx)
                _orig(rec, [(n, local(p)) for n, p in self.named])
                for target in rec.hit:
                    self._mirror(parse_target(target).pattern)

            f.on_parameters = on_parameters

    def shard_rows(self, name: str) -> Optional[Tuple[int, int]]:
        """``(first, stop)``: the rows of parameter ``name`` this rank's shard holds, or None for
        another layout. Under FSDP2 (1-D, HSDP or over TP) these index FSDP's unsharded
        parameter *as this rank computes with it*: the full tensor, or under TP its TP-local
        part (FSDP chunks that on dim 0 over its shard mesh dimension, ``FSDPParam.mesh_info``:
        private, read as torch 2.15 has it). A plain TP DTensor: ``Shard(0)`` on a 1-D mesh."""
        p = self._by_name[name]
        fp = self._fsdp_param(name)
        info = getattr(fp, "mesh_info", None)
        if fp is not None and info is not None and hasattr(info, "shard_mesh_rank"):
            placement = getattr(fp, "fsdp_placement", None)
            if getattr(placement, "dim", 0) != 0:
                return None
            rows = int(fp._orig_size[0])
            rank, size = info.shard_mesh_rank, info.shard_mesh_size
        elif _is_sharded(p) and len(p.placements) == 1 and p.placements[0].dim == 0:
            rows = p.shape[0]
            rank, size = p.device_mesh.get_local_rank(), p.device_mesh.size()
        else:
            return None
        chunk = math.ceil(rows / size) if rows else 0
        first = min(rows, rank * chunk)
        return first, first + local(p).shape[0]

    def _fsdp_param(self, name: str) -> Any:
        model = self.model_ref()
        if model is None or not self.managed:
            return None
        mod, attr = _owner(model, self._raw[name])
        return self.managed.get((id(mod), attr))

    def _mirror(self, name: str) -> None:
        model = self.model_ref()
        p = self._by_name.get(name)
        if model is None or p is None or not is_dtensor(p):
            return
        mod, attr = _owner(model, self._raw[name])
        current = getattr(mod, attr, None)
        if current is None or current is p or self._fsdp_param(name) is None:
            return  # sharded now: the next all-gather reads the corrupted shard
        rows = self.shard_rows(name)
        unsharded = local(current)  # under TP: the TP-local part FSDP gathered
        if rows is None or unsharded.shape[1:] != local(p).shape[1:]:
            return
        with torch.no_grad():
            unsharded.detach()[rows[0]:rows[1]].copy_(local(p).to(unsharded.dtype))

    # --- gradient faults ----------------------------------------------------------------------
    def install_gradient_hooks(self) -> None:
        """``gradient:`` faults on FSDP-managed parameters: a hook on the unsharded parameter,
        registered from a forward pre-hook of its module (FSDP's own pre-hook, prepended, has
        swapped it in by then); the module of the root group gets it now (its group is
        unsharded during the agent's attach)."""
        grads = [f for f in self.agent.faults if "gradient" in f.needs]
        model = self.model_ref()
        if not grads or model is None:
            return
        per_module: Dict[int, Tuple[torch.nn.Module, List[Tuple[str, str, List]]]] = {}
        for name, p in self.named:
            hits = [f for f in grads if faults_mod.match_target(f.pattern, name)]
            if not hits or not is_dtensor(p):
                continue
            mod, attr = _owner(model, self._raw[name])
            per_module.setdefault(id(mod), (mod, []))[1].append((name, attr, hits))
        for mod, targets in per_module.values():
            def pre(module, args, _targets=targets):
                self._hook_unsharded(module, _targets)
                return None

            mod.register_forward_pre_hook(CopySafeHook(pre))
            self._hook_unsharded(mod, targets)

    def _hook_unsharded(self, module, targets) -> None:
        for name, attr, hits in targets:
            p = getattr(module, attr, None)
            if (p is None or p is self._by_name[name] or id(p) in self._grad_hooked
                    or not p.requires_grad):
                continue  # the sharded parameter (its hook would never fire) or done
            self._grad_hooked.add(id(p))
            p.register_hook(CopySafeHook(self._gradient_hook(name, hits)))

    def _gradient_hook(self, name: str, hits: List):
        agent = self.agent

        def hook(grad):
            if not agent._open or agent.micro != agent.micro_batches - 1:
                return None
            new = on_local(grad, lambda g: _chain(agent, name, hits, g))  # under TP: a DTensor
            return None if new is grad else new

        return hook

    # --- the end ------------------------------------------------------------------------------
    def final_fields(self, optimizers: List[Any], steps_done: int, first_loss: Optional[float],
                     last_loss: Optional[float], scale: Optional[torch.Tensor]) -> Dict[str, Any]:
        """The ``final`` event's fields for sharded state (module docstring). No collective: the
        job may have destroyed its process group already. Local tensors that other ranks
        replicate (``replica_ranks``: HSDP, a 2-D mesh's norms) are compared with theirs
        through the store (``ReplicaExchange``), which may wait up to ``REPLICA_WAIT_S``."""
        replicated, consistency, shards = [], [], []
        finite = True
        with torch.no_grad():
            for name, p in self.named:
                t = local(p)
                ok = bool(torch.isfinite(t).all()) if t.numel() else True
                finite = finite and ok
                if _is_sharded(p):
                    consistency += [name, ok]
                    shards.append(t)
                else:
                    replicated.append(t)
        steps, optim_replicated, optim_local = [], [], []
        per_param: Dict[int, List[Any]] = {}  # id(p) -> its optimizer state, local tensors
        for opt in optimizers:
            for group in opt.param_groups:
                for p in group["params"]:
                    state = opt.state.get(p, {})
                    for key in sorted(state):
                        value = state[key]
                        value = local(value) if isinstance(value, torch.Tensor) else value
                        optim_local += [key, value]
                        per_param.setdefault(id(p), []).extend([key, value])
                        if key == "step":
                            steps.append(float(value))
                        elif not _is_sharded(p):
                            optim_replicated += [key, value]
        mine, peers = {}, {}
        for name, p in self.named:
            group = replica_ranks(p) if _is_sharded(p) else []
            if len(group) > 1:
                mine[name] = digest([local(p)] + per_param.get(id(p), []))
                peers[name] = [r for r in group if r != self.agent.rank]
        replicas_equal = None
        if mine and self.exchange is not None:
            agree = self.exchange.compare(mine, peers)
            consistency += ["replicas"] + [x for name in sorted(agree)
                                           for x in (name, agree[name])]
            replicas_equal = all(v is True for v in agree.values())
        fields = dict(steps_completed=steps_done, eval_loss=last_loss,
                      initial_eval_loss=first_loss,
                      params_hash=digest(replicated + consistency),
                      optim_hash=digest(steps + optim_replicated),
                      params_finite=finite, sharded=True,
                      local_params_hash=digest(shards + replicated),
                      local_optim_hash=digest(optim_local))
        if replicas_equal is not None:
            fields["replicas_equal"] = replicas_equal
        if scale is not None:
            fields["loss_scale"] = float(scale)
        return fields

    def withdraw(self) -> None:
        """This rank ends without ``final`` (it failed): replicas waiting for its digests stop
        waiting. Nothing when no local tensor of the model is replicated (no rank waits)."""
        if self.exchange is not None and any(_is_sharded(p) and len(replica_ranks(p)) > 1
                                             for _, p in self.named):
            self.exchange.withdraw()


REPLICA_WAIT_S = 20.0  # how long a rank's final waits for a replica's digests (seconds)


class ReplicaExchange:
    """Compares this rank's digests of replicated local tensors with the replicas' at exit,
    through the job's default c10d store (``distributed_c10d._get_default_store()``, private,
    torch 2.x; taken at attach and held, so it outlives ``destroy_process_group``), never a
    collective: a rank publishes ``{name: digest}`` under ``nanchaos/replicas/<rank>`` and reads
    its replicas' entries, waiting up to ``REPLICA_WAIT_S`` for each. A replica that failed
    publishes nothing usable (``withdraw``), one that never exits times out: either way the
    comparison is unknown, which differs from a peer's True, so the ranks' ``params_hash``
    differ. The store's host (rank 0 under torchrun's ``env://``) waits, bounded by the same
    time, until every rank has read, so that its exit cannot take the store from a slower one.
    Threads: the training thread (atexit)."""

    def __init__(self, rank: int, world: int) -> None:
        self.rank, self.world = rank, world
        self.store = None
        try:
            import torch.distributed as dist

            if dist.is_available() and dist.is_initialized():
                self.store = dist.distributed_c10d._get_default_store()
        except Exception:  # noqa: BLE001 - no store: every comparison is None (unchecked)
            self.store = None

    def _key(self, rank: int) -> str:
        return f"nanchaos/replicas/{rank}"

    def compare(self, mine: Dict[str, str], peers: Dict[str, List[int]]) -> Dict[str, Any]:
        """``{name: True | False | None}``: whether every replica's digest of ``name`` equals
        ``mine[name]`` (None: a replica's could not be read, or no store). ``peers[name]``: the
        other global ranks that replicate it."""
        if self.store is None:
            return {name: None for name in mine}
        theirs: Dict[int, Optional[Dict[str, str]]] = {}
        try:
            self.store.set(self._key(self.rank), json.dumps(mine))
            for r in sorted({r for group in peers.values() for r in group}):
                try:
                    self.store.wait([self._key(r)], timedelta(seconds=REPLICA_WAIT_S))
                    theirs[r] = json.loads(self.store.get(self._key(r)).decode() or "null")
                except Exception:  # noqa: BLE001 - timed out, or the store's host is gone
                    theirs[r] = None
        finally:
            self._done()
        out: Dict[str, Any] = {}
        for name, d in mine.items():
            got = [theirs.get(r) for r in peers[name]]
            present = [g for g in got if g is not None]
            # a peer without ``name`` holds no copy of it (another pipeline stage's parameters)
            out[name] = (None if len(present) < len(got)
                         else all(g[name] == d for g in present if name in g))
        return out

    def withdraw(self) -> None:
        """This rank writes no ``final`` (it failed): its replicas stop waiting for it."""
        if self.store is None:
            return
        try:
            self.store.set(self._key(self.rank), "null")
            self.store.add("nanchaos/replicas/done", 1)
        except Exception:  # noqa: BLE001 - the store's host is gone: nothing waits on us
            pass

    def _done(self) -> None:
        if self.store is None:
            return
        try:
            done = self.store.add("nanchaos/replicas/done", 1)
            deadline = time.monotonic() + REPLICA_WAIT_S
            while self.rank == 0 and done < self.world and time.monotonic() < deadline:
                time.sleep(0.01)
                done = self.store.add("nanchaos/replicas/done", 0)
        except Exception:  # noqa: BLE001
            pass


def attach(agent: Any, model: torch.nn.Module) -> Optional[ShardedModel]:
    """At the agent's attach: a ``ShardedModel`` when ``model`` has DTensor parameters (FSDP2,
    tensor parallelism), with the functional collectives logged and its optimizer hooks,
    parameter-fault adaptation and gradient hooks installed; else None.
    Raises ``RuntimeError`` when FSDP2's records cannot be read (the agent's attach error)."""
    managed = fsdp_params(model)
    if not managed and not any(is_dtensor(p) for p in model.parameters()):
        return None
    sm = ShardedModel(agent, model, managed)
    from . import collectives

    collectives.patch_functional(agent)  # DTensor redistributions (TP) in the flight recorder
    sm.hook_optimizers()
    sm.wrap_parameter_faults()
    sm.install_gradient_hooks()
    sm.exchange = ReplicaExchange(agent.rank, agent.world)
    return sm
