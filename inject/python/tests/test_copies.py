"""Copies of the model under test: ``copy.deepcopy`` (timm-style EMA, a
best-model copy), ``pickle`` / ``torch.save`` of the whole module, and ``state_dict`` round trips.

The agent's module hooks must not drag the agent into a copy (its event log holds a lock, which
``copy.deepcopy`` and ``pickle`` refuse: ``TypeError: cannot pickle '_thread.lock' object``), a
copy's hooks must be inert (a forward of the copy is not a step and a fault never lands in it),
and a pickle must load where the agent is not installed."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from ranks import run_ranks
from test_agent import HEADER, plan, steps_of

ACTIVATION_NAN = {"kind": "tensor", "step": 2,
                  "params": {"target": "activation:layers.2", "value": "nan"}}

# EMA created after the optimizer (so after the agent hooked the model as a candidate), updated
# every step under no_grad; at every step the EMA copy also runs a *training-mode* forward with
# autograd on before the model does (the worst case: it must neither count as a micro-batch nor
# take the step's activation fault).
EMA_AFTER_OPTIMIZER = HEADER + textwrap.dedent('''
    import copy
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    ema = copy.deepcopy(model)
    for p in ema.parameters():
        p.requires_grad_(False)
    g = torch.Generator().manual_seed(1)
    for step in range(STEPS):
        x = torch.randn(16, 8, generator=g); y = torch.randint(0, 4, (16,), generator=g)
        ema_out = ema(x)
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        print("step", step, "loss", loss.item(), "ema_finite", bool(torch.isfinite(ema_out).all()))
        loss.backward()
        opt.step()
        with torch.no_grad():
            for e, p in zip(ema.parameters(), model.parameters()):
                e.mul_(0.9).add_(p, alpha=0.1)
''')


def _losses(output: str):
    return {int(w[1]): (float(w[3]), w[5] == "True")
            for w in (line.split() for line in output.splitlines()) if w[:1] == ["step"]}


def test_ema_copy_after_the_optimizer_is_inert(tmp_path):
    job = run_ranks(tmp_path, EMA_AFTER_OPTIMIZER, plan(faults=[ACTIVATION_NAN]), world=1)
    assert job.codes == [0], job.outputs
    assert steps_of(job, 0) == [(s, "update") for s in range(6)]
    losses = _losses(job.outputs[0])
    # The fault hit the model's forward at step 2 (its loss is NaN), never the EMA copy's.
    assert [s for s, (loss, _) in losses.items() if loss != loss] == [2, 3, 4, 5]
    # (The EMA takes the NaN parameters only in its update at the end of step 2.)
    assert [s for s, (_, ema_finite) in losses.items() if ema_finite] == [0, 1, 2]
    assert [(e["step"], e["target"]) for e in job.of(0, "inject")] == [(2, "activation:layers.2")]
    assert len(job.of(0, "final")) == 1


EMA_AFTER_DDP = HEADER + textwrap.dedent('''
    import copy
    dist.init_process_group("gloo")
    net = Net()
    model = DDP(net)
    ema = copy.deepcopy(model.module)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    ema2 = copy.deepcopy(net)   # after the optimizer too
    g = torch.Generator().manual_seed(dist.get_rank())
    for step in range(STEPS):
        x = torch.randn(16, 8, generator=g); y = torch.randint(0, 4, (16,), generator=g)
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        with torch.no_grad():
            for e, e2, p in zip(ema.parameters(), ema2.parameters(), net.parameters()):
                e.mul_(0.9).add_(p, alpha=0.1); e2.copy_(e)
            ema.eval(); ema(x)
    # The copies hold the inert stand-in where the model holds the agent's hook.
    print("copy_hooks", [h == None.__init__ for c in (ema, ema2) for h in c._forward_pre_hooks.values()])
    dist.destroy_process_group()
''')


def test_ema_copy_after_the_ddp_wrap(tmp_path):
    job = run_ranks(tmp_path, EMA_AFTER_DDP, plan())
    assert job.codes == [0, 0], job.outputs
    for r in range(2):
        assert job.of(r, "start")[0]["ddp"] is True
        assert steps_of(job, r) == [(s, "update") for s in range(6)]
        assert "copy_hooks [True, True]" in job.outputs[r], job.outputs[r]
    f0, f1 = job.of(0, "final")[0], job.of(1, "final")[0]
    assert f0["params_hash"] == f1["params_hash"]


# A best-model copy in the middle of a DDP run, then the other ways a model is copied: a pickle
# round trip, torch.save of the whole module loaded by an interpreter without the agent, and the
# best weights loaded back through state_dict. The copy's forwards (training mode, autograd on)
# never count as steps; after load_state_dict the model still trains and the fault still lands.
BEST_MODEL_MID_RUN = HEADER + textwrap.dedent('''
    import copy, io, pickle, subprocess
    dist.init_process_group("gloo")
    net = Net()
    model = DDP(net)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(dist.get_rank())
    best = None
    for step in range(STEPS):
        x = torch.randn(16, 8, generator=g); y = torch.randint(0, 4, (16,), generator=g)
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        if step == 1:
            best = copy.deepcopy(net)
            best(x).sum().backward()        # a training-mode forward of the copy: not a step
            clone = pickle.loads(pickle.dumps(net))
            clone(x).sum().backward()
            torch.save(net, os.path.join(os.environ["OUT"], f"net-{dist.get_rank()}.pt"))
            buf = io.BytesIO(); torch.save(net.state_dict(), buf); buf.seek(0)
            net.load_state_dict(torch.load(buf))
        if step == 3:
            net.load_state_dict(best.state_dict())
        print("step", step, "loss", loss.item(), "ok", True)
    dist.destroy_process_group()
''')

LOAD_WITHOUT_AGENT = textwrap.dedent('''
    import sys, torch, torch.nn as nn
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 16))
            self.head = nn.Linear(16, 4)
        def forward(self, x):
            return self.head(self.layers(x))
    import __main__; __main__.Net = Net
    kw = {"weights_only": False} if "weights_only" in torch.load.__code__.co_varnames else {}
    net = torch.load(sys.argv[1], **kw)
    assert "nanchaos" not in sys.modules
    out = net.train()(torch.randn(4, 8))
    out.sum().backward()
    print("loaded", tuple(out.shape), "hooks", len(net._forward_pre_hooks), len(net.layers[2]._forward_hooks))
''')


def test_best_model_copy_pickle_and_state_dict_round_trips_mid_run(tmp_path):
    fault = dict(ACTIVATION_NAN, step=4, ranks=[1])
    job = run_ranks(tmp_path, BEST_MODEL_MID_RUN, plan(faults=[fault]),
                    env={"OUT": str(tmp_path)})
    assert job.codes == [0, 0], job.outputs
    for r in range(2):
        assert steps_of(job, r) == [(s, "update") for s in range(6)], job.outputs[r]
        assert [e["code"] for e in job.of(r, "exit")] == [0]
    # The fault landed in the model (after two state_dict loads), on rank 1, at step 4 only.
    assert [(e["step"], e["target"]) for e in job.of(1, "inject")] == [(4, "activation:layers.2")]
    assert job.of(0, "inject") == []
    losses = _losses(job.outputs[1])
    assert losses[4][0] != losses[4][0] and all(losses[s][0] == losses[s][0] for s in range(4))
    # torch.save(model) loads in an interpreter that has no agent.
    env = {k: v for k, v in os.environ.items() if not k.startswith("NANCHAOS_")}
    env.pop("PYTHONPATH", None)
    script = tmp_path / "load.py"
    script.write_text(LOAD_WITHOUT_AGENT)
    out = subprocess.run([sys.executable, str(script), str(tmp_path / "net-1.pt")], env=env,
                         cwd=str(tmp_path), capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "loaded (4, 4)" in out.stdout
