"""DTensor tensor parallelism (``parallelize_module``) under the agent
(nanchaos/sharded.py, fault_hooks.py, collectives.patch_functional).

A small model on a 1-D mesh of two real gloo ranks: ``fc1`` column-wise (weight ``Shard(0)``),
``fc2`` row-wise with its output reduce-scattered along the sequence (weight ``Shard(1)``; its
forward hook sees an ``AsyncCollectiveTensor``), ``norm`` sequence-parallel (weight
``Replicate()``, output a ``DTensor`` ``Shard(1)``), and a plain ``head``. What must hold: the
agent attaches and reads update/skip; a ``parameter:`` fault changes exactly the chosen
elements of the chosen rank's local shard and nothing on the other rank; a ``gradient:`` fault
changes the chosen rank's local gradient shard only (no collective on one rank: before the fix
the element edit redistributed the DTensor gradient on rank 1 alone and the job hung); an
``activation:`` fault on a row-wise module (asynchronous output) and on a sequence-parallel one
(DTensor output) really changes the output that the next module computes with, in the faulted
rank's local part; TP's functional collectives are in the flight recorder, the same sequence on
both ranks; the ``final`` digests agree. Skipped where torch has no DTensor TP (Debian's 1.13).
"""

from __future__ import annotations

import json
import textwrap

import pytest
import torch

from ranks import run_ranks
from test_agent import plan, steps_of


def _has_tp() -> bool:
    try:
        from torch.distributed.tensor import Shard  # noqa: F401
        from torch.distributed.tensor.parallel import parallelize_module  # noqa: F401
        return True
    except Exception:
        return False


pytestmark = pytest.mark.skipif(
    not _has_tp(),
    reason=f"DTensor tensor parallelism (torch.distributed.tensor.parallel) needs torch >= 2.4; "
           f"this is torch {torch.__version__}")

TP_JOB = textwrap.dedent('''
    import json, sys, torch, torch.distributed as dist, torch.nn as nn, torch.nn.functional as F
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard
    from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                                   SequenceParallel, parallelize_module)
    MODE = sys.argv[1]
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    mesh = init_device_mesh("cpu", (2,))
    torch.manual_seed(0)
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = nn.Linear(8, 16)
            self.fc2 = nn.Linear(16, 8)
            self.norm = nn.LayerNorm(8)
            self.head = nn.Linear(8, 4)
            self.seen = {}
        def forward(self, x):
            h = self.fc2(torch.relu(self.fc1(x)))       # [b, s/2, 8] local (rank's sequence half)
            self.seen["fc2"] = h.detach().clone()       # what the next module computes with
            n = self.norm(h)                             # DTensor Shard(1)
            self.seen["norm"] = n.to_local().detach().clone()
            return self.head(n.full_tensor())
    model = Net()
    parallelize_module(model, mesh, {"fc1": ColwiseParallel(),
                                     "fc2": RowwiseParallel(output_layouts=Shard(1)),
                                     "norm": SequenceParallel()})
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, foreach=False)  # mixed DTensor/plain
    g = torch.Generator().manual_seed(10)   # TP: the same batch on every rank
    NAMED = dict(model.named_parameters())
    def local(t):
        return t.to_local() if hasattr(t, "to_local") else t
    def shards():
        return {n: local(p).detach().clone() for n, p in NAMED.items()}
    def emit(**kw):
        print("RESULT " + json.dumps(kw), flush=True)
    for step in range(4):
        x, y = torch.randn(2, 6, 8, generator=g), torch.randint(0, 4, (2, 6), generator=g)
        before = shards()
        out = model(x)
        after = shards()
        changed = {n: (before[n].flatten() != after[n].flatten()).nonzero().flatten().tolist()
                   for n in before if not torch.equal(before[n], after[n])}
        loss = F.cross_entropy(out.flatten(0, 1), y.flatten())
        emit(step=step, changed=changed,
             nonfinite={n: int((~torch.isfinite(t)).sum()) for n, t in after.items()},
             seen={k: [int(i) for i in (~torch.isfinite(v)).flatten().nonzero().flatten()]
                   for k, v in model.seen.items()},
             seen_shape={k: list(v.shape) for k, v in model.seen.items()})
        loss.backward()
        emit(step=step, grad_nonfinite={n: int((~torch.isfinite(local(p.grad))).sum())
                                        for n, p in NAMED.items()})
        if MODE == "skip1" and step == 1:
            opt.zero_grad(set_to_none=True)   # the job's own skip: no parameter written
            continue
        opt.step()
        opt.zero_grad(set_to_none=True)
    dist.destroy_process_group()
''')


def results(job, rank, key):
    out = []
    for line in job.outputs[rank].splitlines():
        if line.startswith("RESULT "):
            res = json.loads(line[len("RESULT "):])
            if key in res:
                out.append(res)
    return out


def tensor_fault(target, ranks, step, **params):
    return {"kind": "tensor", "ranks": ranks, "step": step,
            "params": {"target": target, "value": "nan", **params}}


def test_clean_tp_run_reads_updates_and_skips_logs_tp_collectives_and_equal_digests(tmp_path):
    job = run_ranks(tmp_path, TP_JOB, plan(steps=4), args=("skip1",))
    assert job.codes == [0, 0], job.outputs
    for r in range(2):
        start = job.of(r, "start")[0]
        assert start["parameters"] == ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias",
                                       "norm.weight", "norm.bias", "head.weight", "head.bias"]
        assert steps_of(job, r) == [(0, "update"), (1, "skip"), (2, "update"), (3, "update")]
    f0, f1 = job.of(0, "final")[0], job.of(1, "final")[0]
    assert f0["sharded"] is True and f0["params_finite"] and f1["params_finite"]
    assert f0["params_hash"] == f1["params_hash"] and f0["optim_hash"] == f1["optim_hash"]
    assert f0["local_params_hash"] != f1["local_params_hash"]  # each holds other columns
    # DTensor's redistributions (functional collectives) are logged, in the same order on both
    names = [[(e["seq"], e["name"], e.get("span")) for e in job.of(r, "coll_enter")]
             for r in range(2)]
    assert names[0] == names[1]
    functional = {n for _, n, span in names[0] if span == "functional"}
    assert {"reduce_scatter_single", "all_gather_single", "all_reduce"} <= functional, names[0]
    assert len([1 for *_, span in names[0] if span == "functional"]) >= 4 * 3


@pytest.mark.parametrize("target,local_shape", [("fc1.weight", [8, 8]),   # Shard(0): rows
                                                ("fc2.weight", [8, 8])])  # Shard(1): columns
def test_parameter_fault_writes_only_the_chosen_ranks_local_shard(tmp_path, target, local_shape):
    spec = tensor_fault("parameter:" + target, [1], 2, count=2)
    job = run_ranks(tmp_path, TP_JOB, plan(steps=4, faults=[spec]), args=("plain",))
    assert job.codes == [0, 0], job.outputs
    r0, r1 = results(job, 0, "changed"), results(job, 1, "changed")
    assert [res["changed"] for res in r0[:3]] == [{}, {}, {}]
    assert [res["changed"] for res in r1[:2]] == [{}, {}]
    changed = r1[2]["changed"]
    assert list(changed) == [target] and len(changed[target]) == 2, changed
    assert r1[2]["nonfinite"][target] == 2 and sum(r0[2]["nonfinite"].values()) == 0
    (inject,) = job.of(1, "inject")
    assert inject["step"] == 2 and inject["target"] == "parameter:" + target
    assert inject["detail"]["elements"] == 2 and inject["detail"]["after"] == "nan"
    assert job.of(0, "inject") == []


def test_gradient_fault_changes_only_the_chosen_ranks_local_gradient_shard(tmp_path):
    spec = tensor_fault("gradient:fc1.weight", [1], 1, count=3)
    job = run_ranks(tmp_path, TP_JOB, plan(steps=4, faults=[spec]), args=("plain",), timeout=60)
    assert job.codes == [0, 0], job.outputs
    (inject,) = job.of(1, "inject")
    assert inject["step"] == 1 and inject["target"] == "gradient:fc1.weight"
    assert inject["detail"]["elements"] == 3
    assert job.of(0, "inject") == []
    g0, g1 = results(job, 0, "grad_nonfinite"), results(job, 1, "grad_nonfinite")
    assert sum(g0[0]["grad_nonfinite"].values()) == sum(g1[0]["grad_nonfinite"].values()) == 0
    # step 1: rank 1's local shard of fc1's weight gradient holds the 3 NaNs; rank 0's
    # (the other rows) and every other gradient are untouched (a column-wise weight's gradient
    # needs no collective, so nothing carries the NaN elsewhere)
    assert g1[1]["grad_nonfinite"]["fc1.weight"] == 3
    assert sum(g0[1]["grad_nonfinite"].values()) == 0
    assert all(n == 0 for name, n in g1[1]["grad_nonfinite"].items() if name != "fc1.weight")


@pytest.mark.parametrize("target", ["fc2", "norm"])
def test_activation_fault_changes_the_faulted_ranks_local_output(tmp_path, target):
    # fc2: row-wise, its output an AsyncCollectiveTensor (reduce-scatter in flight);
    # norm: sequence-parallel, its output a DTensor Shard(1). Either way the next module must
    # compute with the injected values, and only rank 1's local part of the output has them.
    spec = tensor_fault("activation:" + target, [1], 2, count=2)
    job = run_ranks(tmp_path, TP_JOB, plan(steps=4, faults=[spec]), args=("plain",))
    assert job.codes == [0, 0], job.outputs
    (inject,) = job.of(1, "inject")
    assert inject["step"] == 2 and inject["target"] == "activation:" + target
    assert job.of(0, "inject") == []
    r0, r1 = results(job, 0, "seen"), results(job, 1, "seen")
    assert r1[2]["seen_shape"][target] == [2, 3, 8]  # the rank's half of the sequence
    assert len(r1[2]["seen"][target]) == 2, r1[2]
    # (from step 3 on the NaN has reached every parameter through the backward and AdamW)
    assert all(not res["seen"][target] for res in r0[:3])
    assert all(not res["seen"][target] for res in r1[:2])
