"""FSDP2 (``fully_shard``) under the agent (issue 29 point 1; nanchaos/sharded.py).

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
    import json, os, sys, torch, torch.distributed as dist, torch.nn as nn, torch.nn.functional as F
    try:
        from torch.distributed.fsdp import fully_shard
    except ImportError:
        from torch.distributed._composable.fsdp import fully_shard
    MODE = sys.argv[1]
    dist.init_process_group("gloo")
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
    for step in range(4):
        x, y = torch.randn(4, 8, generator=g), torch.randint(0, 4, (4,), generator=g)
        before = shards()
        out = model(x)
        after = shards()  # the agent applied this iteration's parameter faults in the forward
        changed = {n: (before[n].flatten() != after[n].flatten()).nonzero().flatten().tolist()
                   for n in before if not torch.equal(before[n], after[n])}
        loss = F.cross_entropy(out, y)
        emit(step=step, loss=loss.item(), changed=changed,
             nonfinite={n: int((~torch.isfinite(t)).sum()) for n, t in after.items()})
        if MODE == "forward-only" and step == 2:
            break
        loss.backward()
        if MODE == "grads":
            emit(step=step, grad_nonfinite={n: int((~torch.isfinite(p.grad.to_local())).sum())
                                            for n, p in SHARDED.items()})
        if MODE == "skip1" and step == 1:
            opt.zero_grad(set_to_none=True)   # the job's own skip: no parameter written
            continue
        opt.step()
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
