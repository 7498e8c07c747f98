"""Pipeline parallelism (``torch.distributed.pipelining``) under the agent: step clock, stages,
final.

Facts it relies on (checked on torch 2.15, CPU, gloo; ``PipelineStage`` exists from torch 2.4):

- Each rank builds only its stages' modules (torchtitan deletes the others' layers from a copy
  of the full model per stage), so module and parameter names keep their full-model FQNs
  (``layers.3.attention.wq``) but a rank knows only its own stages' names. ``PipelineStage(
  submod, stage_index, num_stages, device, ..., group=None)`` holds them in ``stage.submod``; a
  schedule with one stage per rank (``ScheduleGPipe``, ``Schedule1F1B``:
  ``PipelineScheduleSingle``) in ``schedule._stage``, one with several (``PipelineScheduleMulti``:
  ``ScheduleInterleaved1F1B``, ``ScheduleLoopedBFS``, ``ScheduleInterleavedZeroBubble``, placed
  "loop" style, stage s on rank s % ranks) in ``schedule._stages``, one module per stage.
- ``schedule.step(...)`` runs ``n_microbatches`` forwards and backwards of each stage module:
  its forward pre-hooks and gradient hooks fire once per micro-batch (a zero-bubble schedule
  splits a backward into the input's and the weights' parts). The last stage calls the job's
  ``loss_fn`` per micro-batch; the other stages compute no loss.
- Activations go forward and input gradients backward with ``dist.isend``/``dist.irecv``
  (``P2POp``s, ``dist.batch_isend_irecv`` for mixed batches), and ``send_object_list`` /
  ``recv_object_list`` when the stage infers shapes at its first step. That inference runs the
  stage module (and, on the last stage, ``loss_fn``) on the first micro-batch or on empty
  tensors inside ``_initialize_pp_stages``: the agent runs it with the iteration closed
  (``_quiet``). A schedule built without ``loss_fn`` on a stage runs no backward there, so every
  rank must pass ``loss_fn`` (torch's own rule, not the agent's).

Contract (docs/external-jobs.md "Pipeline parallelism", ../shared/SCENARIO_FORMAT.md "Modern
PyTorch jobs"):

- **Step clock**: one iteration = one ``schedule.step()`` call (``Pipeline.before_step``), not
  one forward of a stage module. The agent attaches at the first call: to the stage's module
  when the rank holds one stage, else to ``StageParts``, a view of the rank's stage modules as
  one model (their names merged, no prefix added: each keeps the full-model FQNs).
- **Targets by stage**: at the first ``step`` every rank exchanges, for each stage it holds, the
  stage index and its module and parameter names over the stages' process group (one
  ``all_gather_object``, not in the flight recorder, made by every rank at the same point). A
  fault whose target (``activation:``, ``parameter:``, ``gradient:``) is held by a stage of
  another rank and whose ``ranks`` name this rank is refused on every rank, naming the stage and
  rank that hold it; a fault with ``ranks = "all"`` acts on the ranks whose stages hold its
  target. ``batch`` faults are refused as not implemented.
- **final**: stages hold different parameters, so ``params_hash`` digests what must be equal on
  every rank of a consistent pipeline: the number of stages and whether the local parameters
  are all finite; ``optim_hash`` the set of optimizer step counts (every rank stepped as often).
  The rank's own digests (of all its stages' parameters) are ``local_params_hash``/
  ``local_optim_hash``; ``pipeline_stages`` lists its stage indices (``pipeline_stage`` the
  first); ``has_loss`` is false on a rank that does not hold the last stage (its ``eval_loss``
  is null by design; the judge reads the loss off the last stage, harness/controller/judge.cpp
  ``judge_end_state``).

Threads: everything here runs on the training thread.
"""

from __future__ import annotations

import functools
import sys
from typing import Any, Dict, List, Optional, cast

import torch

from . import faults as faults_mod
from .attach_rules import plain_modules, strip_name
from .copy_safe import CopySafeHook
from .final import digest, final_fields
from .import_hook import patch_when_imported

#: The module whose import triggers the patch (its __init__ imports ``stage`` and ``schedules``).
PACKAGE = "torch.distributed.pipelining"


class StageParts(torch.nn.Module):
    """The stage modules one rank holds (several stages per rank), seen as one model by the
    agent: ``named_modules`` (and through it ``named_parameters``/``named_buffers``, which
    ``nn.Module`` derives from it) yields each part's names unprefixed, in stage order. The parts
    were cut from copies of one full model, so their parameter names are disjoint; a container
    several keep (``layers``) is hooked in the last part only (``plain_modules``). Never called:
    each part runs its own forward inside the schedule. The parts are not registered as children
    (``_parts`` is a plain list), so the view adds no ``0.``/``1.`` prefix and owns nothing."""

    def __init__(self, parts: List[torch.nn.Module]) -> None:
        super().__init__()
        self._parts = list(parts)

    def forward(self, *args, **kwargs):  # pragma: no cover - the schedule calls the parts
        raise RuntimeError("StageParts is the agent's view of a rank's pipeline stages, not a "
                           "module to call")

    def named_modules(self, memo=None, prefix: str = "", remove_duplicate: bool = True):
        memo = set() if memo is None else memo
        for part in self._parts:
            yield from part.named_modules(memo, prefix, remove_duplicate)


class Pipeline:
    """The rank's view of its pipeline: its stages, the step count, where each target lives."""

    def __init__(self, agent: Any) -> None:
        self.agent = agent
        self.steps = 0          # schedule.step() calls so far: the next iteration's number
        self.depth = 0          # schedule.step() calls in progress (a schedule calling another)
        self.stage: Any = None  # the rank's first PipelineStage (first step)
        self.stages: List[Any] = []  # all the rank's PipelineStages, by stage index
        self.num_stages = 0
        self.is_last = True

    # ------------------------------------------------------------------------------------------
    def before_step(self, schedule: Any) -> None:
        """``schedule.step()`` begins: attach (first call), then begin iteration ``self.steps``."""
        agent = self.agent
        if self.stage is None:
            self._first_step(schedule)
        step, self.steps = self.steps, self.steps + 1
        agent._begin_iteration(step)

    def _first_step(self, schedule: Any) -> None:
        agent = self.agent
        stages = getattr(schedule, "_stages", None)
        if stages is None:
            stage = getattr(schedule, "_stage", None)
            stages = [stage] if stage is not None else []
        if not stages:
            agent._fail(f"{type(schedule).__name__} holds no pipeline stage on this rank "
                        "(neither _stage nor _stages): this torch's schedule layout is not "
                        "implemented by the agent")
        stages = sorted(stages, key=lambda st: int(st.stage_index))
        self.stages, self.stage = stages, stages[0]
        self.num_stages = int(stages[0].num_stages)
        self.is_last = any(int(st.stage_index) == self.num_stages - 1 for st in stages)
        mine = [{"stage": int(st.stage_index), "rank": agent.rank,
                 "modules": [n for n, _ in plain_modules(st.submod)],
                 "params": [strip_name(n) for n, _ in st.submod.named_parameters()]}
                for st in stages]
        everyone = self._gather(mine, getattr(stages[0], "group", None))
        self._check_faults(everyone, int(getattr(schedule, "_n_microbatches", 1)))
        agent._pipeline = self  # from here the stage modules' forwards do not count
        if len(stages) == 1:
            model = stages[0].submod
            if not agent.attached:
                agent._resolve(model)
        else:
            model = self._attach_parts([st.submod for st in stages])
        if agent.model is not model:
            what = (f"pipeline stage {stages[0].stage_index}'s module {type(model).__name__}"
                    if len(stages) == 1 else
                    f"the modules of pipeline stages {[int(st.stage_index) for st in stages]}")
            agent._fail(f"the agent attached to {type(agent.model).__name__}, not to {what}: "
                        + ("call nanchaos.attach(stage_module, optimizer) before the first "
                           "schedule.step()" if len(stages) == 1 else
                           "with several stages per rank, do not call nanchaos.attach on one "
                           "of them (the agent attaches to all of this rank's stages)"))

    def _attach_parts(self, parts: List[torch.nn.Module]) -> torch.nn.Module:
        """Several stages on this rank: attaches the agent to ``StageParts(parts)`` (unless it
        attached already: the caller refuses that), with gradient hooks on every part's
        parameters and a forward pre-hook on each part that opens a micro-batch's loss (what
        ``Agent._pre_forward`` does for a single stage module). Returns the attached model."""
        agent = self.agent
        if agent.attached:
            return agent.model
        view = StageParts(parts)
        agent._explicit = view
        agent._watch_candidate(view)  # gradient hooks, owned by the view (fault_hooks.py)
        agent._resolve(view)

        def micro_batch(module, args):
            if module.training and torch.is_grad_enabled():
                agent._awaiting_loss = True
                agent._loss_seen_micro = False
            return None

        for part in parts:
            part.register_forward_pre_hook(CopySafeHook(micro_batch))
        return view

    def _gather(self, mine: List[Dict[str, Any]], group) -> List[Dict[str, Any]]:
        """Every stage's entry (stage index, rank, plain module and parameter names) of every
        rank, ``mine`` being this rank's (one per stage it holds), by one ``all_gather_object``
        over the stages' group that the flight recorder does not log; sorted by stage."""
        import torch.distributed as dist

        from .collectives import _ORIGINALS

        if not dist.is_initialized():
            return list(mine)
        gather = _ORIGINALS.get("all_gather_object", dist.all_gather_object)
        size = dist.get_world_size(group)
        out: List[Any] = [None] * size
        depth = self.agent._coll_depth
        depth.n = getattr(depth, "n", 0) + 1
        try:
            gather(out, mine, group=group)
        finally:
            depth.n -= 1
        return sorted((m for ms in out for m in ms), key=lambda m: m["stage"])

    def _check_faults(self, everyone: List[Dict[str, Any]], n_microbatches: int) -> None:
        """Refuses what cannot act faithfully (see the module docstring); drops from this rank's
        faults those whose target another stage holds and that do not name this rank."""
        agent = self.agent
        keep = []
        for f in agent.faults:
            label = f"[[fault]] #{f.index + 1} ({f.kind})"
            if "batch" in f.needs:
                agent._fail(f"{label}: batch faults on a pipeline-parallel job are not "
                            "implemented (the stage module sees the schedule's micro-batches)")
            why = f.refusal(n_microbatches)  # e.g. a gradient edit not exact over micro-batches
            if why:
                agent._fail(f"{label}: {why} (the schedule runs {n_microbatches} micro-batches "
                            "per step)")
            where = getattr(f, "where", None)
            if where not in ("activation", "parameter", "gradient"):
                keep.append(f)
                continue
            key = "modules" if where == "activation" else "params"
            held = [(m["stage"], m["rank"]) for m in everyone
                    if any(faults_mod.match_target(f.pattern, n) for n in m[key])]
            if not held:
                keep.append(f)  # matches no stage: the agent's own name checks refuse it
                continue
            holders = sorted({r for _, r in held})
            ranks = f.spec.ranks
            if ranks == "all":
                if agent.rank in holders:
                    keep.append(f)
                continue
            wrong = [r for r in ranks if r not in holders]
            if wrong:
                where_held = ", ".join(f"pipeline stage {s} (rank {r})" for s, r in held)
                agent._fail(f"{label}: target {where}:{f.pattern} is held by {where_held}, not "
                            f"by rank {', '.join(map(str, wrong))} named in ranks = {ranks}: "
                            f"each rank builds only its stages' modules; write ranks = "
                            f"{holders} or ranks = \"all\"")
            if agent.rank in ranks:
                keep.append(f)
        agent.faults = keep

    # ------------------------------------------------------------------------------------------
    def final_fields(self, params: List[torch.Tensor], optimizers: List[Any], steps_done: int,
                     first_loss: Optional[float], last_loss: Optional[float],
                     scale: Optional[torch.Tensor]) -> Dict[str, Any]:
        """The ``final`` event's fields for a rank's pipeline stages (module docstring): ``params``
        the attached parameters (all the rank's stages), ``optimizers`` the attached ones. No
        collective."""
        local = final_fields(params, optimizers, steps_done, first_loss, last_loss, scale)
        counts = set()
        for opt in optimizers:
            for state in opt.state.values():
                value = state.get("step")
                if value is not None:
                    counts.add(float(value))
        local.update(local_params_hash=local["params_hash"], local_optim_hash=local["optim_hash"],
                     params_hash=digest(["pipeline", self.num_stages, local["params_finite"]]),
                     optim_hash=digest(sorted(counts)), pipeline_stage=int(self.stage.stage_index),
                     pipeline_stages=[int(st.stage_index) for st in self.stages],
                     has_loss=self.is_last)
        return local


# ----------------------------------------------------------------------------------------------
# patching torch.distributed.pipelining when the job imports it
def _patch_module(agent: Any) -> None:
    """Wraps ``step`` of every schedule class that defines one (``PipelineScheduleSingle``,
    ``PipelineScheduleMulti``, ...) so that it calls ``agent.pipeline.before_step`` first."""
    schedules = sys.modules.get(PACKAGE + ".schedules")
    if schedules is None or getattr(schedules, "_nanchaos_patched", False):
        return
    cast(Any, schedules)._nanchaos_patched = True
    pipeline = agent.pipeline
    for cls in list(vars(schedules).values()):
        if not (isinstance(cls, type) and "step" in vars(cls)):
            continue
        orig = vars(cls)["step"]
        if getattr(orig, "__isabstractmethod__", False):
            continue

        def make(orig):
            @functools.wraps(orig)
            def step(self, *args, **kwargs):
                if pipeline.depth == 0:
                    pipeline.before_step(self)
                pipeline.depth += 1
                try:
                    return orig(self, *args, **kwargs)
                finally:
                    pipeline.depth -= 1

            return step

        cast(Any, cls).step = make(orig)
    for cls in list(vars(schedules).values()):
        for name in INIT_METHODS:
            if isinstance(cls, type) and name in vars(cls):
                setattr(cls, name, _quiet(agent, vars(cls)[name]))


#: The schedule methods that run the stages' shape inference at the first step (torch 2.15: a
#: forward of the stage module on the first micro-batch or on empty tensors, and on the last
#: stage ``loss_fn`` and a backward): none of it is the job's training.
INIT_METHODS = ("_initialize_pp_stages",)


def _quiet(agent: Any, orig):
    """``orig`` run with the iteration closed (``agent._open`` False: no fault applies, no
    backward root is read as a loss) and the losses it computed dropped, so that a fault of
    iteration 0 hits the job's first real micro-batch, not the shape inference."""

    @functools.wraps(orig)
    def run(self, *args, **kwargs):
        was, n = agent._open, len(agent._losses)
        agent._open = False
        try:
            return orig(self, *args, **kwargs)
        finally:
            agent._open = was
            del agent._losses[n:]

    return run


def patch(agent: Any) -> None:
    """At bootstrap: patch ``torch.distributed.pipelining`` now if imported, else when it is."""
    if PACKAGE in sys.modules:
        _patch_module(agent)
        return
    patch_when_imported((PACKAGE,), lambda _name: _patch_module(agent))
