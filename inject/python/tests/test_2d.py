"""2-D meshes under the agent: FSDP2 x tensor parallelism and HSDP
(nanchaos/sharded.py).

FSDP2 x TP: four real gloo ranks on a ``(dp, tp) = (2, 2)`` mesh (global rank ``r`` at
``(r // 2, r % 2)``), a small model split over ``"tp"`` (``fc1`` column-wise, ``fc2`` row-wise
with its output reduce-scattered along the sequence, ``norm`` sequence-parallel, ``head`` left
plain) and then ``fully_shard`` over ``"dp"`` (``fc2`` its own group, the rest the root's).
What must hold: a ``parameter:`` fault changes exactly the chosen elements of global rank 3's
local shard and nothing on any other rank, and rank 3 (with its TP peer, rank 2) computes with
it in that iteration although its group was gathered before the fault; a ``gradient:`` fault
reaches rank 3's TP-local gradient before FSDP's reduce-scatter (the NaNs land in the dp shards
of ranks 1 and 3, the TP column that rank 3 holds, and nowhere else); an ``activation:`` fault
changes rank 3's local output only; the ``final`` digests of a clean run are equal on all four
ranks while the local shards differ, and a replica that diverged (rank 2's copy of a parameter
that rank 3 also holds) makes them unequal. Before sharded.py learnt 2-D meshes the root
group's unsharded TP DTensors were taken for the optimizer's parameters (the ``final``
digests then read freed storage: a segfault at exit), gradient hooks skipped them, and a
diverged replica was judged consistent.

A rank that fails after training withdraws from the replicas' comparison, so its peer does
not wait out ``sharded.REPLICA_WAIT_S``.

HSDP: ``fully_shard`` on a ``(replicate, shard) = (2, 2)`` mesh; the shards of a replica differ,
the replicas' copies must be equal: a clean run's digests agree, a corrupted replica's do not.
Skipped where torch has no FSDP2 or DTensor TP (Debian's 1.13).
"""

from __future__ import annotations

import json
import math
import textwrap

import pytest
import torch

from ranks import run_ranks
from test_agent import plan, steps_of


def _has_2d() -> bool:
    try:
        from torch.distributed.device_mesh import init_device_mesh  # noqa: F401
        from torch.distributed.tensor.parallel import parallelize_module  # noqa: F401
        try:
            from torch.distributed.fsdp import fully_shard  # noqa: F401
        except ImportError:
            from torch.distributed._composable.fsdp import fully_shard  # noqa: F401
        return True
    except Exception:
        return False


pytestmark = pytest.mark.skipif(
    not _has_2d(),
    reason=f"2-D meshes (FSDP2 fully_shard over DTensor tensor parallelism) need torch >= 2.4; "
           f"this is torch {torch.__version__}")

JOB = textwrap.dedent('''
    import json, sys, torch, torch.distributed as dist, torch.nn as nn, torch.nn.functional as F
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard
    from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                                   SequenceParallel, parallelize_module)
    try:
        from torch.distributed.fsdp import fully_shard
    except ImportError:
        from torch.distributed._composable.fsdp import fully_shard
    MODE = sys.argv[1]
    dist.init_process_group("gloo")
    rank = dist.get_rank()
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
            h = self.fc2(torch.relu(self.fc1(x)))
            self.seen["fc2"] = h.detach().clone()   # what the next module computes with
            n = self.norm(h)
            return self.head(n.full_tensor() if hasattr(n, "full_tensor") else n)
    model = Net()
    if MODE.startswith("hsdp"):   # replicas x shards
        mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("replicate", "shard"))
        fully_shard(model, mesh=mesh)
        data_rank = rank
    else:                         # FSDP2 over "dp" on top of TP over "tp"
        mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
        parallelize_module(model, mesh["tp"], {"fc1": ColwiseParallel(),
                                               "fc2": RowwiseParallel(output_layouts=Shard(1)),
                                               "norm": SequenceParallel()})
        fully_shard(model.fc2, mesh=mesh["dp"])
        fully_shard(model, mesh=mesh["dp"])
        data_rank = mesh["dp"].get_local_rank()   # a TP group shares its batch
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, foreach=True)
    g = torch.Generator().manual_seed(10 + data_rank)
    SHARDED = dict(model.named_parameters())  # the optimizer's DTensors (a forward swaps some)
    def shards():
        return {n: p.to_local().detach().clone() for n, p in SHARDED.items()}
    def emit(**kw):
        print("RESULT " + json.dumps(kw), flush=True)
    for step in range(4):
        x, y = torch.randn(2, 6, 8, generator=g), torch.randint(0, 4, (2, 6), generator=g)
        before = shards()
        out = model(x)
        after = shards()   # the agent applied this iteration's parameter faults in the forward
        changed = {n: (before[n].flatten() != after[n].flatten()).nonzero().flatten().tolist()
                   for n in before if not torch.equal(before[n], after[n])}
        loss = F.cross_entropy(out.flatten(0, 1), y.flatten())
        emit(step=step, loss=loss.item(), changed=changed,
             seen=int((~torch.isfinite(model.seen["fc2"])).sum()))
        if MODE == "forward-only" and step == 2:
            break
        loss.backward()
        emit(step=step, grad_nonfinite={n: int((~torch.isfinite(p.grad.to_local())).sum())
                                        for n, p in SHARDED.items()})
        opt.step()
        opt.zero_grad(set_to_none=True)
    if MODE.endswith("diverge") and rank == 2:  # rank 2's copy of what rank 3 also holds
        with torch.no_grad():
            SHARDED["head.weight"].to_local().add_(1e-3)
    dist.destroy_process_group()
    if MODE == "fail2" and rank == 2:
        raise RuntimeError("rank 2 fails after training")
''')

NAMES = ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias", "norm.weight", "norm.bias",
         "head.weight", "head.bias"]


def results(job, rank, key):
    out = []
    for line in job.outputs[rank].splitlines():
        if line.startswith("RESULT "):
            res = json.loads(line[len("RESULT "):])
            if key in res:
                out.append(res)
    return out


def tensor_fault(target, step, **params):
    return {"kind": "tensor", "ranks": [3], "step": step,
            "params": {"target": target, "value": "nan", **params}}


def run(tmp_path, mode, faults=()):
    job = run_ranks(tmp_path, JOB, plan(steps=4, faults=list(faults)), world=4, args=(mode,),
                    timeout=120)
    assert job.codes == [0] * 4, job.outputs
    return job


def test_clean_2d_run_equal_digests_per_dimension_and_collectives_logged(tmp_path):
    job = run(tmp_path, "plain")
    finals = [job.of(r, "final")[0] for r in range(4)]
    for r in range(4):
        assert job.of(r, "start")[0]["parameters"] == NAMES
        assert steps_of(job, r) == [(s, "update") for s in range(4)]
        assert finals[r]["sharded"] is True and finals[r]["params_finite"]
        # norm.* and head.* are replicated over "tp": compared with the TP peer's copy
        assert finals[r]["replicas_equal"] is True
    assert len({f["params_hash"] for f in finals}) == 1
    assert len({f["optim_hash"] for f in finals}) == 1
    assert len({f["local_params_hash"] for f in finals}) == 4  # every rank holds its own part
    # FSDP's (dp) and TP's (tp) collectives, the same sequence of names on every rank
    names = [[(e["seq"], e["name"]) for e in job.of(r, "coll_enter")] for r in range(4)]
    assert names[0] == names[1] == names[2] == names[3]
    logged = {n for _, n in names[0]}
    assert {"all_gather_single", "reduce_scatter_single", "all_reduce"} <= logged, logged


def test_a_diverged_replica_makes_the_2d_digests_unequal(tmp_path):
    job = run(tmp_path, "diverge")
    finals = [job.of(r, "final")[0] for r in range(4)]
    # rank 2 and rank 3 hold the same dp shard of head.weight: both see the difference
    assert [f["replicas_equal"] for f in finals] == [True, True, False, False]
    assert finals[0]["params_hash"] == finals[1]["params_hash"] != finals[2]["params_hash"]
    assert all(f["params_finite"] for f in finals)


@pytest.mark.parametrize("target,group", [("fc1.weight", "root"), ("fc2.weight", "block")])
def test_parameter_fault_writes_only_global_rank_3s_local_shard(tmp_path, target, group):
    job = run(tmp_path, "forward-only", [tensor_fault("parameter:" + target, 2, count=2)])
    res = [results(job, r, "changed") for r in range(4)]
    for r in range(3):
        assert [x["changed"] for x in res[r]] == [{}, {}, {}], (r, res[r])
    assert [x["changed"] for x in res[3][:2]] == [{}, {}]
    changed = res[3][2]["changed"]
    assert list(changed) == [target] and len(changed[target]) == 2, changed
    (inject,) = job.of(3, "inject")
    assert inject["step"] == 2 and inject["target"] == "parameter:" + target
    assert inject["detail"]["elements"] == 2 and inject["detail"]["after"] == "nan"
    assert all(job.of(r, "inject") == [] for r in range(3))
    # Rank 3 computes with its corrupted shard in that iteration, and through TP's
    # reduce-scatter so does its TP peer (rank 2). Its dp peer (rank 1) gathers the shard in
    # that iteration when its group is gathered after the fault (a block), else at the next.
    loss = [[x["loss"] for x in res[r]] for r in range(4)]
    assert all(math.isfinite(v) for r in range(4) for v in loss[r][:2]), loss
    assert math.isnan(loss[3][2]) and math.isnan(loss[2][2]), loss
    assert math.isnan(loss[1][2]) == (group == "block"), loss


def test_gradient_fault_hits_global_rank_3s_tp_local_gradient(tmp_path):
    job = run(tmp_path, "plain", [tensor_fault("gradient:fc1.weight", 1, count=3)])
    (inject,) = job.of(3, "inject")
    assert inject["step"] == 1 and inject["target"] == "gradient:fc1.weight"
    assert inject["detail"]["elements"] == 3
    assert all(job.of(r, "inject") == [] for r in range(3))
    grads = [results(job, r, "grad_nonfinite") for r in range(4)]
    assert all(sum(grads[r][0]["grad_nonfinite"].values()) == 0 for r in range(4))
    # fc1 is column-wise: rank 3 (tp 1) holds rows 8-15 of its weight, which FSDP's
    # reduce-scatter over dp splits between ranks 1 and 3; the tp-0 ranks hold other rows
    bad = [grads[r][1]["grad_nonfinite"] for r in range(4)]
    assert bad[0]["fc1.weight"] == bad[2]["fc1.weight"] == 0, bad
    assert bad[1]["fc1.weight"] + bad[3]["fc1.weight"] == 3, bad
    assert all(n == 0 for b in bad for name, n in b.items() if name != "fc1.weight"), bad


def test_activation_fault_changes_global_rank_3s_local_output_only(tmp_path):
    job = run(tmp_path, "forward-only", [tensor_fault("activation:fc2", 2, count=2)])
    (inject,) = job.of(3, "inject")
    assert inject["step"] == 2 and inject["target"] == "activation:fc2"
    assert all(job.of(r, "inject") == [] for r in range(3))
    seen = [[x["seen"] for x in results(job, r, "seen")] for r in range(4)]
    assert seen == [[0, 0, 0], [0, 0, 0], [0, 0, 0], [0, 0, 2]], seen


def test_hsdp_replicas_compared_clean_equal_corrupted_unequal(tmp_path):
    clean = run(tmp_path, "hsdp")
    finals = [clean.of(r, "final")[0] for r in range(4)]
    assert [f["replicas_equal"] for f in finals] == [True] * 4
    assert len({f["params_hash"] for f in finals}) == 1
    assert len({f["optim_hash"] for f in finals}) == 1
    # ranks 0 and 2 (shard 0 of each replica) hold equal shards, ranks 0 and 1 different ones
    local = [f["local_params_hash"] for f in finals]
    assert local[0] == local[2] and local[1] == local[3] and local[0] != local[1]
    corrupted = run(tmp_path, "hsdp-diverge")
    finals = [corrupted.of(r, "final")[0] for r in range(4)]
    # rank 2 (replica 1, shard 0) diverged from rank 0 (replica 0, shard 0)
    assert [f["replicas_equal"] for f in finals] == [False, True, False, True]
    assert len({f["params_hash"] for f in finals}) == 2


def test_a_failed_replica_withdraws_and_its_peer_does_not_wait(tmp_path):
    # Rank 2 raises after training: it writes no final, and its TP peer (rank 3), which
    # replicates its norm and head shards, learns so from the store at once instead of waiting
    # out REPLICA_WAIT_S (20 s); the comparison is unknown there, so the digests differ.
    job = run_ranks(tmp_path, JOB, plan(steps=4), world=4, args=("fail2",), timeout=120)
    assert job.codes[:2] == [0, 0] and job.codes[2] != 0 and job.codes[3] == 0, job.outputs
    assert job.of(2, "final") == []
    finals = [job.of(r, "final")[0] for r in (0, 1, 3)]
    assert [f["replicas_equal"] for f in finals] == [True, True, False]
    assert finals[0]["params_hash"] == finals[1]["params_hash"] != finals[2]["params_hash"]
    last_step = job.of(3, "step_end")[-1]["t_us"]
    assert finals[2]["t_us"] - last_step < 10_000_000, (finals[2]["t_us"] - last_step)
