"""``nanchaos.sdc_check(fn)`` (nanchaos/sdc.py): the job-side recompute check.

Real gloo ranks with dropout in the model: a clean check matches on every step and changes
nothing the job computes (the same final digests as the job without it), the step clock and the
all-reduce log are the job's; a finite flip in one rank's local gradient, or a scaled module output,
is reported on its step by that rank alone, naming the parameter or the module. Outside the
harness the same check returns its result.
"""

from __future__ import annotations

import textwrap

import torch
import torch.nn as nn
import torch.nn.functional as F

import nanchaos
from ranks import run_ranks
from test_agent import plan, steps_of

# layers: 0 Linear(8, 16), 1 GELU, 2 Dropout, 3 Linear(16, 16); head Linear(16, 4).
SCRIPT = textwrap.dedent('''
    import os, torch, torch.nn as nn, torch.nn.functional as F
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    import nanchaos
    torch.manual_seed(0)
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Dropout(0.3),
                                        nn.Linear(16, 16))
            self.head = nn.Linear(16, 4)
        def forward(self, x):
            return self.head(self.layers(x))
    CHECK = os.environ.get("CHECK") == "1"
    dist.init_process_group("gloo")
    model = DDP(Net())
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(dist.get_rank())
    for step in range(6):
        x = torch.randn(16, 8, generator=g); y = torch.randint(0, 4, (16,), generator=g)
        opt.zero_grad()
        def closure():
            F.cross_entropy(model(x), y).backward()
        if CHECK:
            print("sdc", step, nanchaos.sdc_check(closure), flush=True)
        else:
            closure()
        opt.step()
    dist.destroy_process_group()
''')


def test_clean_checks_match_every_step_and_change_nothing(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    checked = run_ranks(tmp_path / "a", SCRIPT, plan(), env={"CHECK": "1"})
    plain = run_ranks(tmp_path / "b", SCRIPT, plan(), env={"CHECK": "0"})
    assert checked.codes == [0, 0], checked.outputs
    assert plain.codes == [0, 0], plain.outputs
    for r in range(2):
        checks = checked.of(r, "recompute_check")
        assert [c["step"] for c in checks] == list(range(6))
        assert all(c["match"] for c in checks), checks
        assert checked.of(r, "detect") == []
        assert plain.of(r, "recompute_check") == []
        # The recompute is not an iteration and not an all-reduce of the job's.
        assert steps_of(checked, r) == [(s, "update") for s in range(6)]
        assert [e["name"] for e in checked.of(r, "coll_enter")
                if e["name"] == "grad_allreduce"] == ["grad_allreduce"] * 6
        # Dropout drew the same masks: the job ends where it ends without the check.
        assert checked.of(r, "final")[0]["params_hash"] == plain.of(r, "final")[0]["params_hash"]
    for r in range(2):
        assert [ln for ln in checked.outputs[r].splitlines() if ln.startswith("sdc")] == \
            [f"sdc {s} None" for s in range(6)]


def test_low_mantissa_gradient_flip_on_one_rank_is_named_on_its_step(tmp_path):
    p = plan(faults=[{"kind": "bitflip", "step": 3, "ranks": [1],
                      "params": {"target": "gradient:layers.3.weight", "bit": 2, "count": 1}}])
    job = run_ranks(tmp_path, SCRIPT, p, env={"CHECK": "1"})
    assert job.codes == [0, 0], job.outputs
    assert job.of(0, "detect") == []
    det = job.of(1, "detect")
    assert [(d["detector"], d["step"], d["layer"], d["cause"]) for d in det] == \
        [("sdc", 3, "layers.3.weight", "gradient")]
    assert [c["match"] for c in job.of(1, "recompute_check")] == [True] * 3 + [False] + [True] * 2
    # The fault fired once: on the step's own run, not again on the recompute.
    assert len(job.of(1, "inject")) == 1
    assert steps_of(job, 1) == [(s, "update") for s in range(6)]


def test_scaled_module_output_is_cause_activation_naming_the_module(tmp_path):
    p = plan(faults=[{"kind": "tensor", "step": 2, "ranks": [0],
                      "params": {"target": "activation:layers.0", "factor": 1.001}}])
    job = run_ranks(tmp_path, SCRIPT, p, env={"CHECK": "1"})
    assert job.codes == [0, 0], job.outputs
    det = job.of(0, "detect")
    assert [(d["detector"], d["step"], d["layer"], d["cause"]) for d in det] == \
        [("sdc", 2, "layers.0", "activation")]
    assert job.of(1, "detect") == []


class _Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(6, 8), nn.Dropout(0.5), nn.Tanh())
        self.head = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))


def test_outside_the_harness_it_returns_what_differs_and_restores_the_step():
    torch.manual_seed(3)
    model = _Net()
    x, y = torch.randn(5, 6), torch.tensor([0, 1, 2, 0, 1])

    def closure() -> None:
        F.cross_entropy(model(x), y).backward()

    before = torch.get_rng_state()
    assert nanchaos.sdc_check(closure, model=model) is None
    # The gradients and the RNG (dropout's masks) are those of one plain run of the closure.
    grads = [p.grad.clone() for p in model.parameters()]
    after = torch.get_rng_state()
    for p in model.parameters():
        p.grad = None
    torch.set_rng_state(before)
    closure()
    assert all(torch.equal(a, p.grad) for a, p in zip(grads, model.parameters()))
    assert torch.equal(after, torch.get_rng_state())

    # One ulp on one gradient element, on the first run only (a hook, as a fault would).
    calls = {"n": 0}

    def flip(g: torch.Tensor) -> torch.Tensor:
        if calls["n"] == 0:
            g = g.clone()
            g.view(-1)[1] = torch.nextafter(g.view(-1)[1], torch.tensor(1e9))
        return g

    h = model.body[0].weight.register_hook(flip)

    def counted() -> None:
        closure()
        calls["n"] += 1

    got = nanchaos.sdc_check(counted, model=model)
    h.remove()
    assert got == nanchaos.SdcMismatch("body.0.weight", "gradient")

    # A module output changed on the first run only: the forward is named first.
    calls["n"] = 0
    h = model.body[2].register_forward_hook(
        lambda m, i, o: o * 1.0001 if calls["n"] == 0 else None)
    got = nanchaos.sdc_check(counted, model=model)
    h.remove()
    assert got == nanchaos.SdcMismatch("body.2", "activation")
