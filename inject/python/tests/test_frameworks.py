"""The step clock under training frameworks (docs/external-jobs.md, "Frameworks"): one iteration
per optimizer step, every clean step an ``update``, no ``observed:skip`` on a clean run.

Each framework's rule has a plain-torch test of the call shape that broke it (runs on every
torch) and a test on the framework itself, skipped where the interpreter lacks it (the torch 2.x
venv of ``.ci/torch2-venv`` has them)."""

from __future__ import annotations

import importlib.util
import os
import textwrap

import pytest

from ranks import AGENT_DIR, run_ranks
from test_agent import HEADER, plan, steps_of

EXAMPLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "examples",
                        "pytorch")

# Lightning 2.x's _ForwardRedirection: DDP(wrapper) -> wrapper.forward -> training_step, and the
# `self(x)` inside training_step goes back through DDP and the wrapper (a nested forward of the
# module the agent attached to).
REDIRECTED_LOOP = HEADER + textwrap.dedent('''
    class Wrapper(nn.Module):
        def __init__(self, inner):
            super().__init__()
            self._forward_module = inner
            self.redirect = False
        def forward(self, x):
            if self.redirect:
                return self._forward_module(x)
            return training_step(x)
    dist.init_process_group("gloo")
    net = Net()
    model = DDP(Wrapper(net))
    def training_step(x):
        model.module.redirect = True
        try:
            out = model(x)  # through DDP again, as Lightning does
        finally:
            model.module.redirect = False
        return out
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for step in range(STEPS):
        x = torch.randn(16, 8); y = torch.randint(0, 4, (16,))
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
    dist.destroy_process_group()
''')


def assert_clean(job, steps, world):
    assert job.codes == [0] * world, job.outputs
    for r in range(world):
        assert steps_of(job, r) == [(i, "update") for i in range(steps)], (r, steps_of(job, r))
        assert [d for d in job.of(r, "detect")] == []


def test_a_forward_nested_in_the_models_forward_is_not_another_iteration(tmp_path):
    job = run_ranks(tmp_path, REDIRECTED_LOOP, plan(steps=6), world=1)
    assert_clean(job, 6, 1)


def has(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


@pytest.mark.skipif(not has("lightning"), reason="lightning is not installed for this Python")
def test_lightning_ddp_clean_run_updates_every_step(tmp_path):
    script = open(os.path.join(EXAMPLES, "train_lightning.py"), encoding="utf-8").read()
    env = {"PYTHONPATH": os.pathsep.join([AGENT_DIR, EXAMPLES, os.environ.get("PYTHONPATH", "")])}
    job = run_ranks(tmp_path, script, plan(steps=8), world=2,
                    args=["--stack", "synced", "--max-steps", "8"], env=env, timeout=240)
    assert_clean(job, 8, 2)
    start = job.of(0, "start")[0]
    assert "layers.0.linear" in start["modules"] and "head.weight" in start["parameters"]


def fused_adamw_on_cpu() -> bool:
    import torch

    try:
        p = torch.nn.Parameter(torch.zeros(2))
        p.grad = torch.ones(2)
        torch.optim.AdamW([p], fused=True).step()
        return True
    except (RuntimeError, TypeError):
        return False


# HF Trainer's default optimizer since torch 2.8 is AdamW(fused=True), whose kernel writes the
# parameters without bumping their version counters; its causal-LM loss is a reduction="sum"
# cross-entropy divided by the token count afterwards. A step whose gradients were dropped
# (set_to_none) is a real skip.
FUSED_LOOP = HEADER + textwrap.dedent('''
    model = Net()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
    for step in range(STEPS):
        x = torch.randn(16, 8); y = torch.randint(0, 4, (16,))
        y[:4] = -100
        loss = F.cross_entropy(model(x), y, reduction="sum") / (y != -100).sum()
        loss.backward()
        if step == 3:
            opt.zero_grad(set_to_none=True)  # the job's own skip
        opt.step()
        opt.zero_grad()
        print("loss", step, float(loss))
''')


@pytest.mark.skipif(not fused_adamw_on_cpu(), reason="this torch has no fused AdamW on CPU")
def test_fused_adamw_updates_and_a_dropped_step_are_told_apart_and_sum_losses_are_per_item(tmp_path):
    job = run_ranks(tmp_path, FUSED_LOOP, plan(steps=6), world=1)
    assert job.codes == [0], job.outputs
    assert steps_of(job, 0) == [(i, "skip" if i == 3 else "update") for i in range(6)]
    printed = [float(ln.split()[2]) for ln in job.outputs[0].splitlines() if ln.startswith("loss ")]
    recorded = [e["loss"] for e in job.of(0, "step_end")]
    assert recorded == pytest.approx(printed, rel=1e-5)


@pytest.mark.skipif(not (has("transformers") and has("accelerate")),
                    reason="transformers and accelerate are not installed for this Python")
def test_hf_trainer_ddp_clean_run_updates_every_step(tmp_path):
    script = open(os.path.join(EXAMPLES, "train_hf_trainer.py"), encoding="utf-8").read()
    env = {"PYTHONPATH": os.pathsep.join([AGENT_DIR, EXAMPLES, os.environ.get("PYTHONPATH", "")])}
    job = run_ranks(tmp_path, script, plan(steps=6), world=2,
                    args=["--stack", "skip", "--max-steps", "6"], env=env, timeout=240)
    assert_clean(job, 6, 2)
    losses = [e["loss"] for e in job.of(0, "step_end")]
    assert 3.0 < losses[0] < 6.0, losses  # per token (ln 96 = 4.56), not the token sum
    assert "transformer.h.0.attn.c_attn" in job.of(0, "start")[0]["modules"]
