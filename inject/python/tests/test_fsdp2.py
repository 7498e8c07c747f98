"""FSDP2 (``fully_shard``) under the agent (nanchaos/sharded.py).

A small model, ``fully_shard`` on each block and then on the root (torchtitan's order), two real
gloo ranks. What must hold: the agent attaches to the sharded model and reads every iteration's
update or skip; a ``parameter:`` fault changes exactly the chosen elements of the chosen rank's
*local shard* and nothing on the other rank; a block's all-gather (after the fault) hands the
corrupted rows to every rank in that very iteration, and a root-group parameter (gathered before
the model's forward hooks run) is seen by the faulted rank in that iteration too; ``gradient:``
faults reach the full local gradient before the reduce-scatter; ``final`` digests agree across
consistent ranks while the local shards differ. Skipped where torch has no FSDP2 (Debian's 1.13).
"""

from __future__ import annotations

import json
import math
import textwrap

import pytest
import torch

from ranks import run_ranks
from test_agent import plan, steps_of


def _has_fsdp2() -> bool:
    try:
        from torch.distributed.fsdp import fully_shard  # noqa: F401
        return True
    except Exception:
        try:
            from torch.distributed._composable.fsdp import fully_shard  # noqa: F401
            return True
        except Exception:
            return False


pytestmark = pytest.mark.skipif(
    not _has_fsdp2(),
    reason=f"FSDP2 (torch.distributed.fsdp.fully_shard) needs torch >= 2.4; this is torch "
           f"{torch.__version__}")

FSDP2_JOB = textwrap.dedent('''
    import datetime, json, os, sys, torch, torch.distributed as dist, torch.nn as nn
    import torch.nn.functional as F
    try:
        from torch.distributed.fsdp import fully_shard
    except ImportError:
        from torch.distributed._composable.fsdp import fully_shard
    MODE = sys.argv[1]
    dist.init_process_group("gloo", timeout=datetime.timedelta(
        seconds=float(os.environ.get("JOB_PG_TIMEOUT_S", "1800"))))
    rank = dist.get_rank()
    torch.manual_seed(0)
    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(8, 8)
        def forward(self, x):
            return x + torch.tanh(self.fc(x))
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = nn.ModuleList(Block() for _ in range(2))
            self.head = nn.Linear(8, 4)   # the root group's
        def forward(self, x):
            for b in self.blocks:
                x = b(x)
            return self.head(x)
    model = Net()
    if MODE != "root-only":  # else one FSDP group, all of it unsharded during a forward
        for b in model.blocks:
            fully_shard(b)
    fully_shard(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, foreach=True)
    g = torch.Generator().manual_seed(10 + rank)
    SHARDED = dict(model.named_parameters())  # the DTensors (a forward swaps some out)
    def shards():
        return {n: p.to_local().detach().clone() for n, p in SHARDED.items()}
    def emit(**kw):
        print("RESULT " + json.dumps(kw), flush=True)
    def bad(t):  # flat indices of the non-finite elements
        return (~torch.isfinite(t.detach())).flatten().nonzero().flatten().tolist()
    GATHERED = {}
    def see_gathered(module, args):  # blocks.0.fc's parameters as its forward computes with them
        GATHERED.update({"blocks.0.fc." + n: bad(p) for n, p in module.named_parameters()})
    model.blocks[0].fc.register_forward_pre_hook(see_gathered)
    for step in range(4):
        x, y = torch.randn(4, 8, generator=g), torch.randint(0, 4, (4,), generator=g)
        before = shards()
        out = model(x)
        after = shards()  # the agent applied this iteration's parameter faults in the forward
        changed = {n: (before[n].flatten() != after[n].flatten()).nonzero().flatten().tolist()
                   for n in before if not torch.equal(before[n], after[n])}
        loss = F.cross_entropy(out, y)
        emit(step=step, loss=loss.item(), changed=changed,
             nonfinite={n: int((~torch.isfinite(t)).sum()) for n, t in after.items()},
             gathered_bad=dict(GATHERED))
        if MODE == "forward-only" and step == 2:
            break
        if MODE == "forwards":  # forwards only: no backward, no update
            continue
        loss.backward()
        if MODE == "grads":
            emit(step=step, grad_nonfinite={n: int((~torch.isfinite(p.grad.to_local())).sum())
                                            for n, p in SHARDED.items()},
                 grad_bad={n: bad(p.grad.to_local()) for n, p in SHARDED.items()})
        if MODE == "skip1" and step == 1:
            opt.zero_grad(set_to_none=True)   # the job's own skip: no parameter written
            continue
        opt.step()
        if MODE == "optstate":
            emit(step=step, state_bad={f"{n}.{k}": bad(v.to_local())
                                       for n, p in SHARDED.items()
                                       for k, v in opt.state[p].items() if k != "step"})
        opt.zero_grad(set_to_none=True)
    dist.destroy_process_group()
''')


def results(job, rank):
    out = []
    for line in job.outputs[rank].splitlines():
        if line.startswith("RESULT "):
            out.append(json.loads(line[len("RESULT "):]))
    return out


def tensor_fault(target, ranks, step, **params):
    return {"kind": "tensor", "ranks": ranks, "step": step,
            "params": {"target": target, "value": "nan", **params}}


def test_clean_fsdp2_run_reads_updates_and_skips_and_ends_with_equal_sharded_digests(tmp_path):
    job = run_ranks(tmp_path, FSDP2_JOB, plan(steps=4), args=("skip1",))
    assert job.codes == [0, 0], job.outputs
    for r in range(2):
        start = job.of(r, "start")[0]
        # FSDP2 keeps the model's own names; the root group's parameters are listed too
        assert start["parameters"] == ["blocks.0.fc.weight", "blocks.0.fc.bias",
                                       "blocks.1.fc.weight", "blocks.1.fc.bias", "head.weight",
                                       "head.bias"], start
        assert steps_of(job, r) == [(0, "update"), (1, "skip"), (2, "update"), (3, "update")]
        assert all(not res["changed"] for res in results(job, r))
    f0, f1 = job.of(0, "final")[0], job.of(1, "final")[0]
    assert f0["sharded"] is True and f0["params_finite"] and f1["params_finite"]
    assert f0["params_hash"] == f1["params_hash"] and f0["optim_hash"] == f1["optim_hash"]
    # ... while each rank holds other rows: its own shards' digests differ
    assert f0["local_params_hash"] != f1["local_params_hash"]
    assert f0["local_optim_hash"] != f1["local_optim_hash"]
    # FSDP2's collectives are in the flight recorder, the same sequence on both ranks
    names = [[(e["seq"], e["name"]) for e in job.of(r, "coll_enter")] for r in range(2)]
    assert names[0] == names[1]
    assert {"all_gather_single", "reduce_scatter_single"} <= {n for _, n in names[0]}, names[0]


def test_a_model_sharded_only_at_the_root_is_seen_updating(tmp_path):
    # The agent attaches inside the model's first forward, when FSDP has already swapped every
    # parameter of this single group for its unsharded copy: none is the optimizer's.
    job = run_ranks(tmp_path, FSDP2_JOB, plan(steps=4), args=("root-only",))
    assert job.codes == [0, 0], job.outputs
    for r in range(2):
        assert job.of(r, "start")[0]["optimizer"] == ["AdamW"]
        assert steps_of(job, r) == [(s, "update") for s in range(4)]
    assert job.of(0, "final")[0]["params_hash"] == job.of(1, "final")[0]["params_hash"]


@pytest.mark.parametrize("target,gathered_after", [("blocks.1.fc.weight", True),
                                                    ("head.weight", False)])
def test_parameter_fault_writes_only_the_chosen_ranks_local_shard(tmp_path, target,
                                                                  gathered_after):
    spec = tensor_fault("parameter:" + target, [1], 2, count=2)
    job = run_ranks(tmp_path, FSDP2_JOB, plan(steps=4, faults=[spec]), args=("forward-only",))
    assert job.codes == [0, 0], job.outputs
    r0, r1 = results(job, 0), results(job, 1)
    # Rank 1's local shard of the target changed at step 2, in exactly the elements the agent
    # reported, and they are NaN; no other tensor on either rank changed.
    assert [res["changed"] for res in r0] == [{}, {}, {}]
    assert [res["changed"] for res in r1[:2]] == [{}, {}]
    changed = r1[2]["changed"]
    assert list(changed) == [target] and len(changed[target]) == 2, changed
    assert r1[2]["nonfinite"][target] == 2
    assert sum(r0[2]["nonfinite"].values()) == 0
    (inject,) = job.of(1, "inject")
    assert inject["step"] == 2 and inject["target"] == "parameter:" + target
    assert inject["detail"]["elements"] == 2 and inject["detail"]["after"] == "nan"
    assert job.of(0, "inject") == []
    # The faulted rank computes with its corrupted shard in that iteration; the other rank too
    # when the shard's group is all-gathered after the fault (a block), else from the next one.
    assert math.isnan(r1[2]["loss"])
    assert math.isnan(r0[2]["loss"]) == gathered_after
    assert all(math.isfinite(res["loss"]) for res in r0[:2] + r1[:2])


def test_gradient_fault_hits_the_local_gradient_before_the_reduce_scatter(tmp_path):
    spec = tensor_fault("gradient:blocks.0.fc.weight", [1], 1)
    job = run_ranks(tmp_path, FSDP2_JOB, plan(steps=4, faults=[spec]), args=("grads",))
    assert job.codes == [0, 0], job.outputs
    (inject,) = job.of(1, "inject")
    assert inject["step"] == 1 and inject["target"] == "gradient:blocks.0.fc.weight"
    assert job.of(0, "inject") == []
    grads = [[res for res in results(job, r) if "grad_nonfinite" in res] for r in range(2)]
    # step 0 clean; at step 1 the reduce-scatter carried the NaN into the shard that holds its
    # row: exactly one rank's sharded gradient of that parameter, one element, nothing else
    assert all(sum(g[0]["grad_nonfinite"].values()) == 0 for g in grads)
    bad = [g[1]["grad_nonfinite"]["blocks.0.fc.weight"] for g in grads]
    assert sorted(bad) == [0, 1], bad
    assert all(n == 0 for g in grads for name, n in g[1]["grad_nonfinite"].items()
               if name != "blocks.0.fc.weight")


# --- FSDP2's collectives: comm target, hang before the reduce-scatter, optimizer state ---------
# A block's fc (8x8 weight, 8 bias) over 2 ranks: rank r's shard is rows 4r..4r+3 of the weight
# (32 elements) and 4 of the bias, and FSDP packs a group's shards per rank in parameter order
# (weight then bias, no padding: 8 rows divide by 2). Rank r's chunk is elements 36r..36r+35 of
# a reduce-scatter's input; an all-gather's input is the sender's own chunk.
CHUNK, W_LOCAL = 36, 32


def _chunk_place(j):
    """Element j of one rank's packed chunk -> (parameter suffix, flat index in the local shard)."""
    return ("fc.weight", j) if j < W_LOCAL else ("fc.bias", j - W_LOCAL)


def comm_fault(target, ranks, step, **params):
    return {"kind": "comm", "ranks": ranks, "step": step,
            "params": {"target": target, "value": "nan", **params}}


def test_reduce_scatter_corruption_lands_exactly_in_the_chosen_ranks_contribution(tmp_path):
    from nanchaos import rng

    spec = comm_fault("reduce_scatter", [1], 1, count=3)
    job = run_ranks(tmp_path, FSDP2_JOB, plan(steps=4, faults=[spec]), args=("grads",))
    assert job.codes == [0, 0], job.outputs
    (inject,) = job.of(1, "inject")
    assert job.of(0, "inject") == []
    assert inject["step"] == 1 and inject["target"] == "reduce_scatter", inject
    # the iteration's first reduce-scatter is the last block's (its backward finishes first):
    # rank 1's contribution, 2 x 36 elements, three of them NaN
    assert inject["detail"]["numel"] == 2 * CHUNK and inject["detail"]["elements"] == 3
    picked = rng.pick_elements(0, 0, 1, 2 * CHUNK, 3)
    assert inject["detail"]["first_element"] == picked[0]
    want = {0: {}, 1: {}}
    for i in picked:
        owner, j = divmod(i, CHUNK)
        name, k = _chunk_place(j)
        want[owner].setdefault("blocks.1." + name, []).append(k)
    grads = [[res for res in results(job, r) if "grad_bad" in res] for r in range(2)]
    for r in range(2):
        assert all(not v for v in grads[r][0]["grad_bad"].values())  # step 0 clean
        # step 1: each rank's reduced sharded gradient is NaN exactly where rank 1's
        # contribution to that rank's chunk was corrupted, nowhere else
        got = {n: v for n, v in grads[r][1]["grad_bad"].items() if v}
        assert got == {n: sorted(v) for n, v in want[r].items()}, (r, got, picked)
    # the collective was entered and left normally on both ranks (a corrupted payload, no hang)
    for r in range(2):
        assert all(e["status"] == "ok" for e in job.of(r, "coll_leave"))


def test_all_gather_corruption_reaches_the_gathered_parameter_not_the_senders_shard(tmp_path):
    from nanchaos import rng

    spec = comm_fault("all_gather", [1], 2, count=3)
    job = run_ranks(tmp_path, FSDP2_JOB, plan(steps=4, faults=[spec]), args=("forwards",))
    assert job.codes == [0, 0], job.outputs
    (inject,) = job.of(1, "inject")
    assert job.of(0, "inject") == []
    assert inject["step"] == 2 and inject["target"] == "all_gather"
    # the first all-gather after the model's forward began: blocks.0's; rank 1 sends its chunk
    assert inject["detail"]["numel"] == CHUNK
    picked = rng.pick_elements(0, 0, 2, CHUNK, 3)
    want = {}
    for j in picked:
        name, k = _chunk_place(j)
        offset = 4 * 8 if name == "fc.weight" else 4  # rank 1's rows in the full parameter
        want.setdefault("blocks.0." + name, []).append(offset + k)
    want = {n: sorted(v) for n, v in want.items()}
    for r in range(2):
        res = results(job, r)
        # both ranks computed blocks.0 with rank 1's corrupted rows at step 2 (the sender's own
        # slot of the gathered buffer is the buffer it sent), and only at step 2: the next
        # all-gather copies the clean shard in again
        gathered = [{n: v for n, v in x["gathered_bad"].items() if v} for x in res]
        assert gathered == [{}, {}, want, {}], (r, gathered, picked)
        assert math.isnan(res[2]["loss"]) and math.isfinite(res[3]["loss"])
        # no rank's local shard was ever written
        assert all(not x["changed"] for x in res) and all(
            sum(x["nonfinite"].values()) == 0 for x in res)


def test_hang_before_reduce_scatter_keeps_the_rank_out_of_it_while_its_peer_waits(tmp_path):
    spec = {"kind": "hang", "ranks": [1], "step": 1,
            "params": {"duration_ms": 6000, "where": "before_reduce_scatter"}}
    job = run_ranks(tmp_path, FSDP2_JOB, plan(steps=4, faults=[spec]), args=("grads",),
                    env={"JOB_PG_TIMEOUT_S": "2"})
    assert job.codes[0] != 0, job.outputs  # rank 0's process-group timeout fired
    (inject,) = job.of(1, "inject")
    assert inject["step"] == 1 and inject["target"] == "before_reduce_scatter"
    # rank 0 entered the iteration's first reduce-scatter and left it with an error; rank 1
    # entered every collective before it and then none until its stall ended (6 s later)
    enters0 = [e for e in job.of(0, "coll_enter") if e["step"] == 1]
    rs = next(e for e in enters0 if e["name"] == "reduce_scatter_single")
    leave = next(e for e in job.of(0, "coll_leave") if e["seq"] == rs["seq"])
    assert leave["status"] == "error", leave
    before1 = [e for e in job.of(1, "coll_enter") if e["t_us"] < leave["t_us"]]
    assert [e["seq"] for e in before1] == list(range(rs["seq"])), before1
    assert all(e["name"] != "reduce_scatter_single" for e in before1 if e["step"] == 1)
    assert inject["t_us"] < rs["t_us"] + 1_000_000 < leave["t_us"]


def test_optimizer_fault_writes_the_chosen_ranks_local_shard_of_the_state(tmp_path):
    from nanchaos import rng

    spec = tensor_fault("optimizer:blocks.1.fc.weight.exp_avg", [1], 1, count=2)
    job = run_ranks(tmp_path, FSDP2_JOB, plan(steps=4, faults=[spec]), args=("optstate",))
    assert job.codes == [0, 0], job.outputs
    (inject,) = job.of(1, "inject")
    assert job.of(0, "inject") == []
    assert inject["step"] == 1 and inject["target"] == "optimizer:blocks.1.fc.weight.exp_avg"
    states = [[res["state_bad"] for res in results(job, r) if "state_bad" in res]
              for r in range(2)]
    # rank 0 not hit (from step 2 on, rank 1's NaN rows reach everyone through the update and
    # the next all-gather: not looked at)
    assert all(not any(v.values()) for v in states[0][:2]), states[0]
    assert not any(states[1][0].values())
    # after step 1's optimizer step: exactly the picked elements of rank 1's local exp_avg
    # (4 rows x 8 = 32 elements), nothing else
    got = {n: v for n, v in states[1][1].items() if v}
    assert got == {"blocks.1.fc.weight.exp_avg": sorted(rng.pick_elements(0, 0, 1, W_LOCAL, 2))}


@pytest.mark.parametrize("spec,reason", [
    ({"kind": "comm", "params": {"value": "nan"}},
     "comm without target hits DDP's gradient all-reduce, and this job shards its model with "
     "FSDP2 (fully_shard): write target = \"reduce_scatter\" or \"all_gather\""),
    ({"kind": "hang", "params": {"duration_ms": 10, "where": "before_grad_allreduce"}},
     "hang where = \"before_grad_allreduce\": the agent reaches the gradient all-reduce through "
     "DDP's communication hook, and this job has no DistributedDataParallel model (use where = "
     "\"before_reduce_scatter\" or \"step_start\"; it shards its model with FSDP2)"),
])
def test_ddp_collective_points_are_refused_on_fsdp2_naming_its_own(tmp_path, spec, reason):
    spec = dict(spec, ranks=[1], step=1)
    job = run_ranks(tmp_path, FSDP2_JOB, plan(steps=4, faults=[spec]), args=("grads",),
                    env={"JOB_PG_TIMEOUT_S": "20"})
    assert job.codes == [1, 1], job.outputs
    for r in range(2):
        (err,) = job.of(r, "attach_error")
        assert err["reason"] == f"[[fault]] #1 ({spec['kind']}): {reason}"


def test_all_gather_on_a_model_sharded_only_at_its_root_is_refused(tmp_path):
    job = run_ranks(tmp_path, FSDP2_JOB,
                    plan(steps=4, faults=[comm_fault("all_gather", [1], 1)]), args=("root-only",),
                    env={"JOB_PG_TIMEOUT_S": "20"})
    assert job.codes == [1, 1], job.outputs
    assert job.of(0, "attach_error")[0]["reason"] == (
        "[[fault]] #1 (comm): comm target = \"all_gather\" hits the first all-gather after the "
        "model's forward began, and this model is sharded only at its root, whose all-gather "
        "FSDP runs before that: shard its blocks with fully_shard too")


@pytest.mark.parametrize("where", ["data", "compute", "backward", "comm"])
def test_slow_fault_is_own_time_of_its_phase_under_fsdp2(tmp_path, where):
    # FSDP2's all-gathers and reduce-scatters are blocking calls on gloo: the peer of the slowed
    # rank waits in them (wait_us), whatever phase they fall in; `comm` is the stall before the
    # iteration's first reduce-scatter, inside the backward, moved to the comm phase.
    from test_agent import assert_slow_phase_is_own_time

    spec = {"kind": "slow", "ranks": [1], "step": 2,
            "params": {"steps": 1, "delay_ms": 150, "where": where}}
    job = run_ranks(tmp_path, FSDP2_JOB, plan(steps=4, faults=[spec]), args=("plain",))
    assert job.codes == [0, 0], job.outputs
    assert [e["step"] for e in job.of(1, "step_end")] == [0, 1, 2, 3]
    assert_slow_phase_is_own_time(job, where, 1, {2}, 150_000)
