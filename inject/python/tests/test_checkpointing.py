"""Activation faults under activation checkpointing.

``torch.utils.checkpoint.checkpoint`` runs its function twice: in the forward (under ``no_grad``
when reentrant) and again in backward to recompute what it did not keep. An ``activation:`` fault
on a module inside must change the forward output the loss sees, and the recompute must see the
very same values (the fault is a pure function of seed, step, rank and element), or the gradients
belong to another forward and checkpoint's own consistency checks fail (torch 1.13 "Attempt to
retrieve a tensor saved by autograd multiple times without checkpoint recomputation", torch 2.x
``CheckpointError``).

Each test runs the same job without checkpointing and with it (reentrant, non-reentrant): every
iteration's loss and the final parameters must be bit-identical, with exactly one ``inject``
event, so checkpointing changes nothing about what the fault did."""

from __future__ import annotations

import textwrap

import pytest

from ranks import run_ranks
from test_agent import plan, steps_of

CHECKPOINTED = textwrap.dedent('''
    import hashlib, os, sys, torch, torch.nn as nn, torch.nn.functional as F
    from torch.utils.checkpoint import checkpoint
    import nanchaos
    MODE = sys.argv[1]
    MICRO = int(os.environ.get("MICRO", "1"))
    torch.manual_seed(0)
    class Block(nn.Module):
        def __init__(self, i):
            super().__init__()
            self.i = i
            self.fc = nn.Linear(16, 16)
            self.act = nn.GELU()
        def forward(self, x):
            return x + self.act(nanchaos.probe(f"mid{self.i}", self.fc(x)))
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Linear(8, 16)
            self.blocks = nn.ModuleList(Block(i) for i in range(2))
            if MODE.startswith("wrapper"):  # torch.distributed's checkpoint_wrapper
                from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
                    CheckpointImpl, checkpoint_wrapper)
                impl = CheckpointImpl.REENTRANT if MODE.endswith("-reentrant") else CheckpointImpl.NO_REENTRANT
                self.blocks = nn.ModuleList(checkpoint_wrapper(b, checkpoint_impl=impl) for b in self.blocks)
            self.head = nn.Linear(16, 4)
        def forward(self, x):
            h = self.stem(x)
            for b in self.blocks:
                if MODE in ("none",) or MODE.startswith("wrapper"):
                    h = b(h)
                else:
                    h = checkpoint(b, h, use_reentrant=MODE == "reentrant")
            return self.head(h)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(1)
    for step in range(6):
        opt.zero_grad()
        loss = 0.0
        for micro in range(MICRO):
            x = torch.randn(16, 8, generator=g); y = torch.randint(0, 4, (16,), generator=g)
            part = F.cross_entropy(model(x), y) / MICRO
            part.backward()   # always: the recompute runs in here
            loss += part.item()
        with torch.no_grad():   # an evaluation forward: never hit, checkpointed or not
            model.eval(); model(x); model.train()
        finite = all(bool(torch.isfinite(p.grad).all()) for p in model.parameters())
        print("step", step, "loss", repr(loss), "grads_finite", finite, flush=True)
        if finite:
            opt.step()
    h = hashlib.blake2b(digest_size=16)
    for p in model.parameters():
        h.update(p.detach().numpy().tobytes())
    print("digest", h.hexdigest())
''')

FAULTS = {
    "nan": {"target": "activation:blocks.1.fc", "value": "nan"},
    "x100": {"target": "activation:blocks.0", "factor": 100.0},
    "probe_x100": {"target": "activation:mid1", "factor": 100.0},
}


def _run(tmp_path, mode, fault, micro=1):
    spec = {"kind": "tensor", "step": 2, "params": dict(FAULTS[fault]),
            "given": list(FAULTS[fault])}
    if fault != "nan":
        spec["params"]["count"] = 8
        spec["given"].append("count")
    job = run_ranks(tmp_path / mode, CHECKPOINTED, plan(faults=[spec], micro_batches=micro),
                    world=1, args=(mode,), env={"MICRO": str(micro)})
    assert job.codes == [0], job.outputs[0][-3000:]
    lines = [line.split() for line in job.outputs[0].splitlines()]
    losses = {int(w[1]): w[3] for w in lines if w[:1] == ["step"]}
    digest = next(w[1] for w in lines if w[:1] == ["digest"])
    return job, losses, digest


@pytest.mark.parametrize("fault", ["nan", "x100"])
@pytest.mark.parametrize("mode", ["reentrant", "nonreentrant"])
def test_checkpointed_activation_fault_hits_the_forward_and_the_recompute_alike(
        tmp_path, mode, fault):
    (tmp_path / "none").mkdir()
    (tmp_path / mode).mkdir()
    _, ref_losses, ref_digest = _run(tmp_path, "none", fault)
    job, losses, digest = _run(tmp_path, mode, fault)
    # The forward output the loss saw carries the fault (step 2 differs from a clean step).
    if fault == "nan":
        assert losses[2] == "nan", losses
    assert losses == ref_losses
    assert digest == ref_digest
    injects = job.of(0, "inject")
    assert [(e["step"], e["target"]) for e in injects] == [(2, FAULTS[fault]["target"])]
    assert [a for _, a in steps_of(job, 0)] == (
        ["update", "update", "skip", "update", "update", "update"] if fault == "nan"
        else ["update"] * 6)


@pytest.mark.parametrize("mode", ["reentrant", "nonreentrant"])
def test_a_probe_in_a_checkpointed_function_with_micro_batches(tmp_path, mode):
    # Two micro-batches per iteration: the fault hits the first micro-batch's forward, its
    # recompute replays it, and the second micro-batch's forward and recompute are untouched.
    (tmp_path / "none").mkdir()
    (tmp_path / mode).mkdir()
    _, ref_losses, ref_digest = _run(tmp_path, "none", "probe_x100", micro=2)
    job, losses, digest = _run(tmp_path, mode, "probe_x100", micro=2)
    assert losses == ref_losses
    assert digest == ref_digest
    assert [(e["step"], e["target"]) for e in job.of(0, "inject")] == [(2, "activation:mid1")]


@pytest.mark.parametrize("mode", ["wrapper-reentrant", "wrapper-nonreentrant"])
def test_checkpoint_wrapper_modules(tmp_path, mode):
    # torch.distributed's checkpoint_wrapper (what apply_activation_checkpointing installs): the
    # target keeps its plain name (blocks.1.fc, no _checkpoint_wrapped_module).
    (tmp_path / "none").mkdir()
    (tmp_path / mode).mkdir()
    _, ref_losses, ref_digest = _run(tmp_path, "none", "nan")
    job, losses, digest = _run(tmp_path, mode, "nan")
    assert losses[2] == "nan" and losses == ref_losses
    assert digest == ref_digest
    assert [(e["step"], e["target"]) for e in job.of(0, "inject")] == [(2, "activation:blocks.1.fc")]
