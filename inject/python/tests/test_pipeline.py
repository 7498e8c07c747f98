"""Pipeline parallelism (``torch.distributed.pipelining``) under the agent
(nanchaos/pipeline.py, collectives.patch_p2p).

A small model split over two real gloo ranks, torchtitan's way (each rank deletes the other
stage's modules and keeps the full-model names): stage 0 = ``emb``, ``layers.0``, ``layers.1``;
stage 1 = ``layers.2``, ``layers.3``, ``head`` and the loss; ``ScheduleGPipe`` with 2
micro-batches. What must hold: one iteration per ``schedule.step()`` (4 steps, not 8
per-micro-batch forwards); update/skip read per stage and the ``final`` digests equal on both
ranks (stage-independent), with the loss on the last stage only; an ``activation:`` fault on a
stage-0 module really changes that stage's output on rank 0 (the output rank 0 sends on), and
the last stage's loss goes NaN in that step; a ``parameter:`` fault with ``ranks = "all"`` acts
only on the rank whose stage holds the parameter; a fault whose ``ranks`` name a rank that does
not hold its target is refused on every rank, naming the stage that holds it; sends and receives
are in the flight recorder, the same sequence on both ranks.

Several stages per rank (``PipelineScheduleMulti``: interleaved 1F1B, looped BFS, interleaved
zero bubble): the network cut into 4 stages on 2 ranks, "loop" style (rank 0: stages 0 and 2).
One iteration per ``schedule.step()``, the agent attached to both of a rank's stages; an
``activation:`` fault on stage 2's module changes stage 2's output on rank 0 (not stage 0's) and
stage 3's loss on rank 1; a ``gradient:`` fault with ``ranks = "all"`` acts only on the rank
holding the parameter's stage; a target held by a stage of another rank is refused naming that
stage and rank.

Four ranks, one stage each: every rank's sends and receives are logged (``p2p_enter``, numbered
apart from the collectives) with their peers, each send paired with its receive, and the
collectives keep one numbering on every rank. Skipped where torch has no
``torch.distributed.pipelining`` (Debian's 1.13).
"""

from __future__ import annotations

import json
import math
import textwrap

import pytest
import torch

from ranks import run_ranks
from test_agent import plan, steps_of


def _has_pipelining() -> bool:
    try:
        from torch.distributed.pipelining import PipelineStage, ScheduleGPipe  # noqa: F401
        return True
    except Exception:
        return False


pytestmark = pytest.mark.skipif(
    not _has_pipelining(),
    reason=f"pipeline parallelism (torch.distributed.pipelining) needs torch >= 2.4; "
           f"this is torch {torch.__version__}")

PP_JOB = textwrap.dedent('''
    import json, torch, torch.distributed as dist, torch.nn as nn, torch.nn.functional as F
    from torch.distributed.pipelining import PipelineStage, ScheduleGPipe
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Linear(8, 16)
            self.layers = nn.ModuleDict({str(i): nn.Linear(16, 16) for i in range(4)})
            self.head = nn.Linear(16, 4)
        def forward(self, x):
            h = self.emb(x) if self.emb is not None else x
            for layer in self.layers.values():
                h = torch.relu(layer(h))
            return self.head(h) if self.head is not None else h
    model = Net()
    if rank == 0:
        del model.layers["2"], model.layers["3"]
        model.head = None
    else:
        del model.layers["0"], model.layers["1"]
        model.emb = None
    outs = []   # what this stage computed, per micro-batch (and sent on, on stage 0)
    model.register_forward_hook(lambda m, a, out: outs.append(out.detach().clone()))
    stage = PipelineStage(model, rank, 2, torch.device("cpu"))
    sched = ScheduleGPipe(stage, n_microbatches=2, loss_fn=lambda out, y: F.cross_entropy(out, y))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    NAMED = dict(model.named_parameters())
    g = torch.Generator().manual_seed(10)
    for step in range(4):
        x, y = torch.randn(4, 8, generator=g), torch.randint(0, 4, (4,), generator=g)
        before = {n: p.detach().clone() for n, p in NAMED.items()}
        outs.clear()
        losses = []
        if rank == 0:
            sched.step(x)
        else:
            sched.step(target=y, losses=losses)
        changed = {n: int((before[n] != p.detach()).sum()) for n, p in NAMED.items()
                   if not torch.equal(torch.nan_to_num(before[n]), torch.nan_to_num(p.detach()))}
        print("RESULT " + json.dumps({
            "step": step, "changed": changed,
            "out_nonfinite": [int((~torch.isfinite(o)).sum()) for o in outs[-2:]],
            "losses": [float(l.detach()) for l in losses]}), flush=True)
        opt.step()
        opt.zero_grad(set_to_none=True)
    dist.destroy_process_group()
''')


def results(job, rank):
    return [json.loads(line[len("RESULT "):]) for line in job.outputs[rank].splitlines()
            if line.startswith("RESULT ")]


def channels(job, world):
    """Every rank's ``p2p_enter`` events paired per directed channel: ``{(src, dst): [(step,
    numel), ...]}`` in order, asserting that the n-th send from src to dst and dst's n-th
    receive from src agree (step and size) and that both ends made as many."""
    sends, recvs = {}, {}
    for r in range(world):
        for e in job.of(r, "p2p_enter"):
            if e["op"] == "send":
                sends.setdefault((r, e["peer"]), []).append((e["step"], e["numel"]))
            else:
                recvs.setdefault((e["peer"], r), []).append((e["step"], e["numel"]))
    assert sends == recvs, (sends, recvs)
    return sends


def tensor_fault(target, ranks, step, **params):
    return {"kind": "tensor", "ranks": ranks, "step": step,
            "params": {"target": target, "value": "nan", **params}}


def test_clean_pipeline_one_iteration_per_schedule_step(tmp_path):
    job = run_ranks(tmp_path, PP_JOB, plan(steps=4), world=2)
    assert job.codes == [0, 0], job.outputs
    for r in (0, 1):
        # Before pipeline.py: one iteration per micro-batch forward (8), every one a "skip".
        assert steps_of(job, r) == [(s, "update") for s in range(4)], job.events[r]
    ends0, ends1 = job.of(0, "step_end"), job.of(1, "step_end")
    assert all(e["loss"] is None for e in ends0)  # stage 0 computes no loss
    # The last stage's loss: the mean of the schedule's micro-batch losses (not the shape
    # inference's forward on empty tensors).
    for e, res in zip(ends1, results(job, 1)):
        assert math.isclose(e["loss"], sum(res["losses"]) / 2, rel_tol=1e-6)
    f0, f1 = job.of(0, "final")[0], job.of(1, "final")[0]
    assert f0["params_hash"] == f1["params_hash"] and f0["optim_hash"] == f1["optim_hash"]
    assert f0["local_params_hash"] != f1["local_params_hash"]
    assert (f0["has_loss"], f1["has_loss"]) == (False, True)
    assert (f0["pipeline_stage"], f1["pipeline_stage"]) == (0, 1)
    # Sends and receives in the flight recorder (p2p_enter), each send paired with the receive
    # at the other end (channels()).
    assert channels(job, 2) and set(channels(job, 2)) == {(0, 1), (1, 0)}


def test_activation_fault_hits_the_stage_that_holds_the_module(tmp_path):
    job = run_ranks(tmp_path, PP_JOB, plan(steps=4, faults=[
        tensor_fault("activation:layers.1", [0], 2)]), world=2)
    assert job.codes == [0, 0], job.outputs
    inj = job.of(0, "inject")
    assert [(e["step"], e["target"]) for e in inj] == [(2, "activation:layers.1")]
    assert job.of(1, "inject") == []
    res0, res1 = results(job, 0), results(job, 1)
    # Rank 0's stage output (what it sends to stage 1) is NaN in step 2's first micro-batch
    # (relu keeps NaN), finite before it and in step 2's second micro-batch; stage 1's loss of
    # that micro-batch is NaN. (Step 3 is NaN too: the job steps AdamW on the NaN gradient.)
    assert [r["out_nonfinite"][0] > 0 for r in res0[:3]] == [False, False, True]
    assert all(r["out_nonfinite"][1] == 0 for r in res0[:3])
    assert math.isnan(res1[2]["losses"][0]) and math.isfinite(res1[1]["losses"][0])


def test_parameter_fault_on_all_ranks_acts_where_the_parameter_lives(tmp_path):
    job = run_ranks(tmp_path, PP_JOB, plan(steps=3, faults=[
        tensor_fault("parameter:layers.2.weight", "all", 1)]), world=2)
    assert job.codes == [0, 0], job.outputs
    assert job.of(0, "inject") == []
    assert [(e["step"], e["target"]) for e in job.of(1, "inject")] == [
        (1, "parameter:layers.2.weight")]
    assert "layers.2.weight" in results(job, 1)[1]["changed"]


def test_fault_on_another_stages_module_is_refused_naming_the_stage(tmp_path):
    job = run_ranks(tmp_path, PP_JOB, plan(steps=3, faults=[
        tensor_fault("activation:layers.3", [0], 1)]), world=2)
    assert job.codes[0] != 0 and job.codes[1] != 0, job.outputs
    for r in (0, 1):
        errs = job.of(r, "attach_error")
        assert errs, job.outputs[r]
        assert "pipeline stage 1 (rank 1)" in errs[0]["reason"]
        assert "ranks = [0]" in errs[0]["reason"]
        assert job.of(r, "step_end") == []


# Several stages per rank (PipelineScheduleMulti): the same network cut into 4 stages, placed
# "loop" style on 2 ranks (rank 0: stages 0 and 2, rank 1: stages 1 and 3), one module copy per
# stage. Stage 0 = emb + layers.0, 1 = layers.1, 2 = layers.2, 3 = layers.3 + head.
PP_MULTI_JOB = textwrap.dedent('''
    import json, sys, torch, torch.distributed as dist, torch.nn as nn, torch.nn.functional as F
    from torch.distributed import pipelining
    from torch.distributed.pipelining import PipelineStage
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    SCHEDULE = sys.argv[1]
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Linear(8, 16)
            self.layers = nn.ModuleDict({str(i): nn.Linear(16, 16) for i in range(4)})
            self.head = nn.Linear(16, 4)
        def forward(self, x):
            h = self.emb(x) if self.emb is not None else x
            for layer in self.layers.values():
                h = torch.relu(layer(h))
            return self.head(h) if self.head is not None else h
    N = 2 * world
    mine = [rank + i * world for i in range(2)]
    parts, stages, outs = [], [], {}
    for s in mine:
        torch.manual_seed(0)
        m = Net()
        for i in range(4):
            if i != s:
                del m.layers[str(i)]
        if s != 0:
            m.emb = None
        if s != N - 1:
            m.head = None
        outs[s] = []   # what stage s computed (and sent on), per micro-batch
        m.register_forward_hook(lambda mod, a, out, s=s: outs[s].append(out.detach().clone()))
        parts.append(m)
        stages.append(PipelineStage(m, s, N, torch.device("cpu")))
    sched = getattr(pipelining, SCHEDULE)(stages, n_microbatches=2,
                                          loss_fn=lambda out, y: F.cross_entropy(out, y))
    opt = torch.optim.AdamW([p for m in parts for p in m.parameters()], lr=1e-2)
    NAMED = {n: p for m in parts for n, p in m.named_parameters()}
    g = torch.Generator().manual_seed(10)
    for step in range(4):
        x, y = torch.randn(4, 8, generator=g), torch.randint(0, 4, (4,), generator=g)
        before = {n: p.detach().clone() for n, p in NAMED.items()}
        for o in outs.values():
            o.clear()
        losses = []
        if 0 in mine:
            sched.step(x)
        else:
            sched.step(target=y, losses=losses)
        changed = {n: int((before[n] != p.detach()).sum()) for n, p in NAMED.items()
                   if not torch.equal(torch.nan_to_num(before[n]), torch.nan_to_num(p.detach()))}
        print("RESULT " + json.dumps({
            "step": step, "changed": changed,
            "out_nonfinite": {str(s): [int((~torch.isfinite(o)).sum()) for o in outs[s][-2:]]
                              for s in mine},
            "grad_nonfinite": {n: int((~torch.isfinite(p.grad)).sum()) for n, p in NAMED.items()
                               if p.grad is not None},
            "losses": [float(l.detach()) for l in losses]}), flush=True)
        opt.step()
        opt.zero_grad(set_to_none=True)
    dist.destroy_process_group()
''')

@pytest.mark.parametrize("schedule", ["ScheduleInterleaved1F1B", "ScheduleLoopedBFS",
                                      "ScheduleInterleavedZeroBubble"])
def test_several_stages_per_rank_one_iteration_per_schedule_step(tmp_path, schedule):
    from torch.distributed import pipelining

    if not hasattr(pipelining, schedule):
        pytest.skip(f"torch {torch.__version__} has no {schedule}")
    job = run_ranks(tmp_path, PP_MULTI_JOB, plan(steps=4), world=2, args=(schedule,))
    # Before: refused at the first schedule.step() ("... not implemented by the agent yet").
    assert job.codes == [0, 0], job.outputs
    for r in (0, 1):
        assert steps_of(job, r) == [(s, "update") for s in range(4)], job.events[r]
    assert all(e["loss"] is None for e in job.of(0, "step_end"))  # rank 0 holds no last stage
    for e, res in zip(job.of(1, "step_end"), results(job, 1)):
        assert math.isclose(e["loss"], sum(res["losses"]) / 2, rel_tol=1e-6)
    f0, f1 = job.of(0, "final")[0], job.of(1, "final")[0]
    assert f0["params_hash"] == f1["params_hash"] and f0["optim_hash"] == f1["optim_hash"]
    assert (f0["pipeline_stages"], f1["pipeline_stages"]) == ([0, 2], [1, 3])
    assert (f0["has_loss"], f1["has_loss"]) == (False, True)
    # The agent attached to both of each rank's stages: their parameters, merged, unprefixed.
    assert set(job.of(0, "start")[0]["parameters"]) == {
        "emb.weight", "emb.bias", "layers.0.weight", "layers.0.bias", "layers.2.weight",
        "layers.2.bias"}


def test_interleaved_activation_fault_hits_the_stage_that_holds_the_module(tmp_path):
    # layers.2 is stage 2's, on rank 0 (with stage 0): its output, which rank 0 sends to stage 3
    # on rank 1, is NaN in step 2's first micro-batch; stage 0's output is untouched.
    job = run_ranks(tmp_path, PP_MULTI_JOB, plan(steps=4, faults=[
        tensor_fault("activation:layers.2", [0], 2)]), world=2, args=("ScheduleInterleaved1F1B",))
    assert job.codes == [0, 0], job.outputs
    assert [(e["step"], e["target"]) for e in job.of(0, "inject")] == [(2, "activation:layers.2")]
    assert job.of(1, "inject") == []
    res0, res1 = results(job, 0), results(job, 1)
    assert [r["out_nonfinite"]["2"][0] > 0 for r in res0[:3]] == [False, False, True]
    assert res0[2]["out_nonfinite"]["2"][1] == 0  # the step's second micro-batch: clean
    assert all(n == 0 for r in res0[:3] for n in r["out_nonfinite"]["0"])
    # Stage 3 (rank 1) computed with it: that micro-batch's loss is NaN, the step before's not.
    assert math.isnan(res1[2]["losses"][0]) and math.isfinite(res1[1]["losses"][0])
    assert math.isfinite(res1[2]["losses"][1])


def test_interleaved_gradient_fault_on_all_ranks_acts_where_the_parameter_lives(tmp_path):
    job = run_ranks(tmp_path, PP_MULTI_JOB, plan(steps=3, faults=[
        tensor_fault("gradient:layers.3.weight", "all", 1)]), world=2,
        args=("ScheduleInterleaved1F1B",))
    assert job.codes == [0, 0], job.outputs
    assert job.of(0, "inject") == []
    assert [(e["step"], e["target"]) for e in job.of(1, "inject")] == [
        (1, "gradient:layers.3.weight")]
    # Rank 1's accumulated gradient of layers.3.weight (stage 3) is NaN after step 1's
    # schedule.step(), not after step 0's; rank 0's stages' gradients stay finite.
    res0, res1 = results(job, 0), results(job, 1)
    assert [r["grad_nonfinite"]["layers.3.weight"] > 0 for r in res1[:2]] == [False, True]
    assert all(n == 0 for n in res0[1]["grad_nonfinite"].values())


def test_interleaved_fault_on_another_ranks_stage_is_refused_naming_stage_and_rank(tmp_path):
    job = run_ranks(tmp_path, PP_MULTI_JOB, plan(steps=3, faults=[
        tensor_fault("activation:layers.3", [0], 1)]), world=2, args=("ScheduleInterleaved1F1B",))
    assert job.codes[0] != 0 and job.codes[1] != 0, job.outputs
    for r in (0, 1):
        errs = job.of(r, "attach_error")
        assert errs, job.outputs[r]
        assert "is held by pipeline stage 3 (rank 1), not by rank 0" in errs[0]["reason"]
        assert "ranks = [1]" in errs[0]["reason"]
        assert job.of(r, "step_end") == []


# Four ranks, one stage each (stage r holds layers.r; emb on stage 0, head on stage 3), GPipe, and
# one all-reduce of the job per step after schedule.step().
PP4_JOB = textwrap.dedent('''
    import torch, torch.distributed as dist, torch.nn as nn, torch.nn.functional as F
    from torch.distributed.pipelining import PipelineStage, ScheduleGPipe
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Linear(8, 16) if rank == 0 else None
            self.layers = nn.ModuleDict({str(rank): nn.Linear(16, 16)})
            self.head = nn.Linear(16, 4) if rank == world - 1 else None
        def forward(self, x):
            h = self.emb(x) if self.emb is not None else x
            for layer in self.layers.values():
                h = torch.relu(layer(h))
            return self.head(h) if self.head is not None else h
    model = Net()
    stage = PipelineStage(model, rank, world, torch.device("cpu"))
    sched = ScheduleGPipe(stage, n_microbatches=2, loss_fn=lambda out, y: F.cross_entropy(out, y))
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    g = torch.Generator().manual_seed(10)
    for step in range(3):
        x, y = torch.randn(4, 8, generator=g), torch.randint(0, 4, (4,), generator=g)
        if rank == 0:
            sched.step(x)
        elif rank == world - 1:
            sched.step(target=y)
        else:
            sched.step()
        dist.all_reduce(torch.ones(1))
        opt.step()
        opt.zero_grad(set_to_none=True)
    dist.destroy_process_group()
''')


def test_four_stage_pipeline_logs_sends_and_receives_with_their_peers(tmp_path):
    job = run_ranks(tmp_path, PP4_JOB, plan(steps=3), world=4)
    assert job.codes == [0] * 4, job.outputs
    # Before: nothing logged beyond 2 ranks. Now every rank's sends and receives, paired per
    # channel along the pipeline (forward r -> r+1, backward r+1 -> r), in every step.
    pairs = channels(job, 4)
    assert set(pairs) == {(0, 1), (1, 2), (2, 3), (1, 0), (2, 1), (3, 2)}
    for calls in pairs.values():
        # 3 steps x 2 micro-batches, plus the shape inference's exchange in step 0
        assert sorted({step for step, _ in calls}) == [0, 1, 2]
        assert len([c for c in calls if c[0] == 2]) == 2
    counts = [len(job.of(r, "p2p_enter")) for r in range(4)]
    assert counts[1] == counts[2] == 2 * counts[0] == 2 * counts[3]
    # The collectives keep one numbering every rank shares: the middle stages' extra sends and
    # receives do not shift it.
    seqs = [[e["seq"] for e in job.of(r, "coll_enter") if e["name"] == "all_reduce"]
            for r in range(4)]
    assert seqs[0] and all(q == seqs[0] for q in seqs), seqs
