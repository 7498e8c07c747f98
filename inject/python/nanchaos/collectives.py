"""The flight recorder: collectives the job makes, logged as ``coll_enter``/``coll_leave``.

Two sources, numbered by one per-rank sequence in call order (DESIGN.md "Process model": a hang
is attributed by comparing which ranks entered collective #k, as PyTorch's flight recorder does):

* DDP's gradient buckets, through a communication hook
  (``DistributedDataParallel.register_comm_hook``).
  DDP accepts one hook per model, so the agent wraps whatever the job registers (its own Python
  hook or a built-in one) and otherwise registers DDP's default all-reduce
  (``torch.distributed.algorithms.ddp_comm_hooks.default_hooks.allreduce_hook``) wrapped, at the
  model's first training forward. The wrapper applies ``comm`` and ``hang`` faults to the bucket,
  then logs enter, and leave when the bucket's future completes. DDP's reducer calls the C++
  process group directly, so this hook is the only place its collectives can be seen.
* The job's own ``torch.distributed`` calls (``all_reduce``, ``broadcast``, ``barrier``, ...):
  the module functions are wrapped at bootstrap, before the job imports them. Calls nested inside
  another wrapped call are not logged twice. An ``async_op=True`` call leaves when its Work's
  future completes (or at once, status ``async``, where the backend has no futures). FSDP2's
  all-gathers and reduce-scatters are among them (``FSDP_POINTS``); the same wrapper hands
  their input to ``agent.on_fsdp_collective`` before ``coll_enter`` (comm and hang faults on
  FSDP2: a hang there keeps the rank out of the collective's entry).

Point-to-point sends and receives (pipeline parallelism) are logged apart, as ``p2p_enter``/
``p2p_leave`` with their own per-rank numbering and their peer (``patch_p2p``).

On NCCL a collective "leaves" when it is enqueued on the stream, not when it completes.

Phase times (phases.py): a blocking call's duration is time waiting in collectives
(``agent.phases.wait_ns``); the time spent in a gradient-collective hook before the rank enters
the collective (the DDP comm hook's call, the faults before FSDP2's reduce-scatter) is the
``comm`` phase's (``agent.phases.hook_ns``), though it runs inside the backward.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Dict, List, cast

import torch
import torch.distributed as dist

from .events import now_us
from .phases import now_ns

COLLECTIVE_NAMES = (
    "all_reduce", "broadcast", "barrier", "monitored_barrier", "all_gather", "all_gather_object",
    "all_gather_into_tensor", "_all_gather_base", "reduce", "reduce_scatter",
    "reduce_scatter_tensor", "_reduce_scatter_base", "all_to_all", "all_to_all_single", "gather",
    "scatter", "broadcast_object_list", "gather_object", "scatter_object_list",
    # FSDP2's all-gathers and reduce-scatters on torch 2.15 (called as dist.<name>)
    "all_gather_single", "reduce_scatter_single",
)


def _bucket_buffer(bucket) -> torch.Tensor:
    return bucket.buffer() if hasattr(bucket, "buffer") else bucket.get_tensor()


def _enter_bucket(agent, bucket) -> tuple:
    """Bucket faults (comm, hang before_grad_allreduce), then ``coll_enter``: (buffer, seq)."""
    buf = _bucket_buffer(bucket)
    agent.on_bucket(bucket.index(), buf)
    seq = agent.coll_enter("grad_allreduce", count=buf.numel(),
                           dtype=_DTYPE.get(buf.dtype) or str(buf.dtype)[6:], bucket=bucket.index())
    return buf, seq


def _leave_when_done(agent, seq: int, fut, unwrap: bool):
    """The hook's future, chained with one callback that logs ``coll_leave`` (status ``error``
    when the all-reduce failed, e.g. a peer's process-group timeout) and returns the bucket."""

    def done(f):
        try:
            value = f.value()
        except BaseException:
            agent.coll_leave(seq, "grad_allreduce", "error")
            raise
        agent.coll_leave(seq, "grad_allreduce")
        return value[0] if unwrap else value

    return fut.then(done)


def _wrap_hook(agent, inner):
    def nanchaos_comm_hook(state, bucket):
        t0 = now_ns()
        buf, seq = _enter_bucket(agent, bucket)
        depth = agent._coll_depth
        depth.n = getattr(depth, "n", 0) + 1  # the inner hook's own dist calls are this one
        try:
            fut = inner(state, bucket)
        except BaseException:
            agent.coll_leave(seq, "grad_allreduce", "error")
            raise
        finally:
            depth.n -= 1
            agent.phases.hook_ns += now_ns() - t0
        return _leave_when_done(agent, seq, fut, unwrap=False)

    return nanchaos_comm_hook


def patch_ddp(agent) -> None:
    """Wraps DDP's constructor (the model) and its comm-hook registration (one hook per model)."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    orig_init = DDP.__init__
    orig_register = DDP.register_comm_hook
    orig_builtin = getattr(DDP, "_register_builtin_comm_hook", None)

    @functools.wraps(orig_init)
    def __init__(self, *a, **k):
        orig_init(self, *a, **k)
        self._nanchaos_hooked = False
        agent.on_ddp(self)

    @functools.wraps(orig_register)
    def register_comm_hook(self, state, hook):
        self._nanchaos_hooked = True
        return orig_register(self, state, _wrap_hook(agent, hook))

    _ORIG_REGISTER[0] = orig_register
    patched: Any = DDP  # monkeypatching: the job's DDP class gains the agent's wrappers
    patched.__init__ = __init__
    patched.register_comm_hook = register_comm_hook
    if orig_builtin is not None:
        @functools.wraps(orig_builtin)
        def _register_builtin_comm_hook(self, comm_hook_type):
            from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

            python_twin = {
                "ALLREDUCE": default_hooks.allreduce_hook,
                "FP16_COMPRESS": default_hooks.fp16_compress_hook,
            }.get(getattr(comm_hook_type, "name", str(comm_hook_type)))
            if python_twin is None:
                return orig_builtin(self, comm_hook_type)  # unknown: the agent cannot see inside
            return register_comm_hook(self, self.process_group, python_twin)

        patched._register_builtin_comm_hook = _register_builtin_comm_hook


def ensure_comm_hook(agent, ddp) -> None:
    """At attach: the job registered no hook. Register the agent's own all-reduce, which does what
    DDP's default does (divide by the world size, SUM; as ``default_hooks.allreduce_hook``) with
    one completion callback that both logs the leave and returns the bucket (wrapping the Python
    default hook would cost a second callback, each taking the GIL on the process-group thread)."""
    if getattr(ddp, "_nanchaos_hooked", False):
        return
    from torch.distributed.distributed_c10d import _get_default_group

    all_reduce = _ORIGINALS.get("all_reduce", dist.all_reduce)

    def nanchaos_allreduce(process_group, bucket):
        t0 = now_ns()
        group = process_group if process_group is not None else _get_default_group()
        buf, seq = _enter_bucket(agent, bucket)
        buf.div_(group.size())
        fut = all_reduce(buf, group=group, async_op=True).get_future()
        agent.phases.hook_ns += now_ns() - t0
        return _leave_when_done(agent, seq, fut, unwrap=True)

    ddp._nanchaos_hooked = True
    _ORIG_REGISTER[0](ddp, ddp.process_group, nanchaos_allreduce)


_DTYPE = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16",
          torch.float64: "float64"}
_ORIGINALS: Dict[str, Callable[..., Any]] = {}  # torch.distributed's own functions, by name
_ORIG_REGISTER: List[Any] = [None]  # DDP.register_comm_hook as torch defines it


def _describe(args, kwargs) -> tuple:
    t = args[0] if args else kwargs.get("tensor", kwargs.get("output"))
    if isinstance(t, torch.Tensor):
        return t.numel(), str(t.dtype).replace("torch.", "")
    if isinstance(t, (list, tuple)) and t and isinstance(t[0], torch.Tensor):
        return sum(x.numel() for x in t), str(t[0].dtype).replace("torch.", "")
    return 0, ""


# FSDP2's all-gather and reduce-scatter, as torch.distributed names them: torch 2.15 calls
# all_gather_single / reduce_scatter_single (as dist.<name>, looked up at call time), earlier 2.x
# all_gather_into_tensor / reduce_scatter_tensor. The fault point of each (comm target, hang
# where = "before_reduce_scatter"; agent.on_fsdp_collective).
FSDP_POINTS = {"all_gather_single": "all_gather", "all_gather_into_tensor": "all_gather",
               "_all_gather_base": "all_gather", "reduce_scatter_single": "reduce_scatter",
               "reduce_scatter_tensor": "reduce_scatter", "_reduce_scatter_base": "reduce_scatter"}


def _fsdp_input(point: str, args, kwargs) -> Any:
    """The input tensor of an all-gather (``input_tensor``, this rank's part, which FSDP2 copies
    into its own slot of the output buffer) or a reduce-scatter (``input``, this rank's full
    contribution: world size x the output's elements), the second argument of every signature
    in ``FSDP_POINTS``; None when it is not a tensor."""
    t = args[1] if len(args) > 1 else kwargs.get("input_tensor" if point == "all_gather"
                                                 else "input")
    return t if isinstance(t, torch.Tensor) else None


def patch_distributed(agent) -> None:
    """Wraps the job-facing ``torch.distributed`` collectives (see the module docstring)."""
    depth = agent._coll_depth

    def wrap(name, orig):
        point = FSDP_POINTS.get(name)

        @functools.wraps(orig)
        def wrapper(*args, **kwargs):
            if getattr(depth, "n", 0) > 0:
                return orig(*args, **kwargs)
            if point is not None and agent._need_fsdp_collective:  # before the rank enters
                t0 = now_ns()
                agent.on_fsdp_collective(point, _fsdp_input(point, args, kwargs))
                agent.phases.hook_ns += now_ns() - t0
            count, dtype = _describe(args, kwargs)
            seq = agent.coll_enter(name, count=count, dtype=dtype)
            depth.n = getattr(depth, "n", 0) + 1
            t0 = now_ns()
            try:
                work = orig(*args, **kwargs)
            except BaseException:
                agent.coll_leave(seq, name, "error")
                raise
            finally:
                depth.n -= 1
                agent.phases.wait_ns += now_ns() - t0  # async_op: only the call's own time
            if kwargs.get("async_op") and work is not None:
                try:
                    work.get_future().then(lambda f: agent.coll_leave(seq, name))
                except Exception:  # a backend without futures: leave when enqueued
                    agent.coll_leave(seq, name, "async")
            else:
                agent.coll_leave(seq, name)
            return work

        wrapper._nanchaos_wrapped = True
        return wrapper

    for name in COLLECTIVE_NAMES:
        orig = getattr(dist, name, None)
        if orig is None or getattr(orig, "_nanchaos_wrapped", False):
            continue
        _ORIGINALS[name] = orig
        setattr(dist, name, wrap(name, orig))
    patch_p2p(agent)


# The functional collectives DTensor's redistributions call (tensor parallelism's all-reduces,
# all-gathers and reduce-scatters, forward and backward), as torch 2.15 names them in
# torch.distributed._functional_collectives; a name a torch lacks is skipped.
FUNCTIONAL_NAMES = ("all_reduce", "all_gather_tensor", "all_gather_single", "reduce_scatter_tensor",
                    "reduce_scatter_single", "all_to_all_single", "broadcast")


def patch_functional(agent) -> None:
    """Wraps ``torch.distributed._functional_collectives``' collectives (``FUNCTIONAL_NAMES``),
    once, so that DTensor's redistributions (tensor parallelism: a row-wise linear's output
    all-reduce or reduce-scatter, a sequence-parallel all-gather, their backward twins, a DTensor
    ``clip_grad_norm_``'s reduction) enter the flight recorder: ``coll_enter`` with ``span``
    "functional" and the input's element count and dtype, ``coll_leave`` when the call returns.

    DTensor looks these up as ``funcol.<name>`` at call time (torch 2.4 to 2.15), so wrapping
    the module attributes reaches it. Caveat: a functional collective returns at once with an
    ``AsyncCollectiveTensor`` that waits at its first use, so on gloo as on NCCL "leave" means
    issued, not completed; a rank whose peer stopped blocks in that later wait, after the
    enter of the collective its peer never entered (which is what blame compares). Calls from
    compiled graphs (inductor lowers them to ops) are not seen."""
    try:
        import torch.distributed._functional_collectives as funcol
    except ImportError:  # torch without functional collectives: nothing to log
        return
    if getattr(funcol, "_nanchaos_patched", False):
        return
    cast(Any, funcol)._nanchaos_patched = True
    depth = agent._coll_depth

    def wrap(name, orig):
        @functools.wraps(orig)
        def wrapper(*args, **kwargs):
            if getattr(depth, "n", 0) > 0:
                return orig(*args, **kwargs)
            t = args[0] if args else kwargs.get("self", kwargs.get("input"))
            count, dtype = _describe((t,), {})
            seq = agent.coll_enter(name, count=count, dtype=dtype, span="functional")
            depth.n = getattr(depth, "n", 0) + 1
            try:
                out = orig(*args, **kwargs)
            except BaseException:
                agent.coll_leave(seq, name, "error")
                raise
            finally:
                depth.n -= 1
            agent.coll_leave(seq, name)
            return out

        wrapper._nanchaos_wrapped = True
        return wrapper

    for name in FUNCTIONAL_NAMES:
        orig = getattr(funcol, name, None)
        if orig is None or getattr(orig, "_nanchaos_wrapped", False):
            continue
        setattr(funcol, name, wrap(name, orig))


# Point-to-point: pipeline parallelism's activations and input gradients (pipeline.py).
P2P_NAMES = {"send": "send", "isend": "send", "send_object_list": "send",
             "recv": "recv", "irecv": "recv", "recv_object_list": "recv"}


def _peer(kwargs, args, op: str):
    """The peer's global rank of a send (``dst``/``group_dst``) or receive (``src``/``group_src``)
    call, or None where not given (a receive from any source)."""
    key = "dst" if op == "send" else "src"
    peer = kwargs.get(key, args[1] if len(args) > 1 else None)
    group_peer = kwargs.get("group_" + key)
    if peer is None and group_peer is not None:
        group = kwargs.get("group")
        try:
            peer = group_peer if group is None else dist.get_global_rank(group, group_peer)
        except Exception:
            peer = group_peer
    return None if peer is None else int(peer)


def _p2p_enter(agent, op: str, tensor, peer) -> int:
    """``p2p_enter`` of one send or receive: its number in this rank's own point-to-point
    sequence (``agent._p2p_seq``, apart from the collectives' ``seq``), ``op`` (``send`` or
    ``recv``), ``peer`` (the other end's global rank; null for a receive from any source), the
    element count ``numel`` and dtype, the iteration. Returns the number."""
    seq = next(agent._p2p_seq)
    numel, dtype = _describe((tensor,), {})
    peer_text = "null" if peer is None else str(peer)
    agent.log.write_line(
        f'{{"ev":"p2p_enter","t_us":{now_us()},"seq":{seq},"op":"{op}","peer":{peer_text},'
        f'"numel":{numel},"dtype":"{dtype}","step":{agent.step}}}')
    return seq


def _p2p_leave(agent, seq: int, status: str) -> None:
    agent.log.write_line(f'{{"ev":"p2p_leave","t_us":{now_us()},"seq":{seq},'
                         f'"status":"{status}"}}')


def patch_p2p(agent) -> None:
    """Wraps ``dist.send/recv/isend/irecv``, ``send_object_list``/``recv_object_list`` and
    ``batch_isend_irecv`` (one entry per ``P2POp``) into the flight recorder, in jobs of any
    size, as ``p2p_enter``/``p2p_leave`` events numbered on their own (``_p2p_enter``): a middle
    pipeline stage makes twice the point-to-point calls of an end stage, so they cannot share
    the collectives' per-rank sequence, which every rank must number alike. The judge pairs the
    n-th send from a to b with b's n-th receive from a (torch matches them in that order) and
    blames the rank that the others' unmatched calls wait on and that waits on no one
    (harness/controller/postmortem.cpp ``find_p2p_stall``; docs/external-jobs.md "Pipeline
    parallelism"). Asynchronous calls leave at once with status ``async`` (issued, not
    completed); blocking ones when they return (``ok``) or raise (``error``)."""
    depth = agent._coll_depth

    def logged() -> bool:
        return getattr(depth, "n", 0) == 0 and dist.is_initialized()

    def wrap(name, orig):
        op = P2P_NAMES[name]
        blocking = name in ("send", "recv", "send_object_list", "recv_object_list")

        @functools.wraps(orig)
        def wrapper(*args, **kwargs):
            if not logged():
                return orig(*args, **kwargs)
            t = args[0] if args else kwargs.get("tensor", kwargs.get("object_list"))
            seq = _p2p_enter(agent, op, t, _peer(kwargs, args, op))
            depth.n = getattr(depth, "n", 0) + 1
            t0 = now_ns()
            try:
                out = orig(*args, **kwargs)
            except BaseException:
                _p2p_leave(agent, seq, "error")
                raise
            finally:
                depth.n -= 1
                agent.phases.wait_ns += now_ns() - t0
            _p2p_leave(agent, seq, "ok" if blocking else "async")
            return out

        wrapper._nanchaos_wrapped = True
        return wrapper

    def wrap_batch(orig):
        @functools.wraps(orig)
        def batch_isend_irecv(p2p_op_list):
            if not logged():
                return orig(p2p_op_list)
            seqs = []
            for p in p2p_op_list:
                op = "send" if getattr(p.op, "__name__", "") == "isend" else "recv"
                seqs.append(_p2p_enter(agent, op, p.tensor, getattr(p, "peer", None)))
            depth.n = getattr(depth, "n", 0) + 1
            try:
                out = orig(p2p_op_list)
            except BaseException:
                for seq in seqs:
                    _p2p_leave(agent, seq, "error")
                raise
            finally:
                depth.n -= 1
            for seq in seqs:
                _p2p_leave(agent, seq, "async")
            return out

        batch_isend_irecv._nanchaos_wrapped = True
        return batch_isend_irecv

    # Also replaced in distributed_c10d itself: P2POp and batch_isend_irecv check that an op
    # ``is`` that module's ``isend``/``irecv`` (a P2POp built with the job-facing wrapper must
    # pass), and calls between its own functions then stay unlogged (depth).
    from torch.distributed import distributed_c10d as c10d

    for name in list(P2P_NAMES) + ["batch_isend_irecv"]:
        orig = getattr(dist, name, None)
        if orig is None or getattr(orig, "_nanchaos_wrapped", False):
            continue
        _ORIGINALS[name] = orig
        new = wrap_batch(orig) if name == "batch_isend_irecv" else wrap(name, orig)
        setattr(dist, name, new)
        if getattr(c10d, name, None) is orig:
            setattr(c10d, name, new)
