"""Target names are the model's own (docs/scenario-format.md "Modern PyTorch jobs"): wrapper
components stripped, and a target written with one, or naming nothing, refused before the job's
first optimizer step with the nearest plain names. The wrappers here are the shapes Lightning,
torch.compile and activation checkpointing build (an attribute holding the real module), written
in plain torch so the test runs on every torch."""

from __future__ import annotations

import textwrap

from nanchaos.attach_rules import strip_name, wrapper_in

from ranks import run_ranks
from test_agent import HEADER, plan


def test_strip_name_removes_wrapper_components_and_keeps_the_models_own():
    assert strip_name("_forward_module.net._orig_mod.0.weight") == "net.0.weight"
    assert strip_name("module._forward_module.head.bias") == "head.bias"
    assert strip_name("layers.0._checkpoint_wrapped_module.attn") == "layers.0.attn"
    assert strip_name("_fsdp_wrapped_module.layers.1._fsdp_wrapped_module.mlp") == "layers.1.mlp"
    assert strip_name("_forward_module") == ""
    # `module` is DDP's only while leading: a model's own submodule may carry that name.
    assert strip_name("block.module.proj") == "block.module.proj"
    assert wrapper_in("_forward_module.layers.0") == "_forward_module"
    assert wrapper_in("layers.*._checkpoint_wrapped_module") == "_checkpoint_wrapped_module"
    assert wrapper_in("layers.0") is None


# A Lightning-shaped job: DDP wraps a wrapper whose `_forward_module` is the user's model, and one
# block is checkpoint-wrapped (the wrapper and the block it holds share the plain name layers.1).
WRAPPED_LOOP = HEADER + textwrap.dedent('''
    class Wrapper(nn.Module):
        def __init__(self, inner):
            super().__init__()
            self._forward_module = inner
        def forward(self, x):
            return self._forward_module(x)
    class CheckpointWrapper(nn.Module):
        def __init__(self, inner):
            super().__init__()
            self._checkpoint_wrapped_module = inner
        def forward(self, x):
            return self._checkpoint_wrapped_module(x)
    dist.init_process_group("gloo")
    net = Net()
    net.layers[1] = CheckpointWrapper(net.layers[1])
    model = DDP(Wrapper(net))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for step in range(STEPS):
        x = torch.randn(16, 8); y = torch.randint(0, 4, (16,))
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
    dist.destroy_process_group()
''')


def test_plain_names_reach_modules_under_wrappers_and_hook_them_once(tmp_path):
    p = plan(faults=[{"kind": "tensor", "step": 2,
                      "params": {"target": "activation:layers.1", "value": "nan", "count": 1}},
                     {"kind": "tensor", "step": 3,
                      "params": {"target": "gradient:head.weight", "value": "inf", "count": 1}}])
    job = run_ranks(tmp_path, WRAPPED_LOOP, p, world=1)
    assert job.codes == [0], job.outputs
    start = job.of(0, "start")[0]
    assert "layers.1" in start["modules"] and "head.weight" in start["parameters"]
    assert not any("_forward_module" in n or "_checkpoint_wrapped_module" in n
                   for n in start["modules"] + start["parameters"])
    assert start["modules"].count("layers.1") == 1
    got = [(e["target"], e["step"]) for e in job.of(0, "inject")]
    assert got == [("activation:layers.1", 2), ("gradient:head.weight", 3)]


def test_a_target_with_a_wrapper_prefix_is_refused_at_attach_with_the_plain_name(tmp_path):
    p = plan(faults=[{"kind": "tensor", "step": 2,
                      "params": {"target": "activation:_forward_module.layers.1", "value": "nan"}}])
    job = run_ranks(tmp_path, WRAPPED_LOOP, p, world=1)
    assert job.codes == [1]
    reason = job.of(0, "attach_error")[0]["reason"]
    assert "without the wrapper's `_forward_module.`" in reason, reason
    assert job.of(0, "step_end") == []


def test_a_misspelt_activation_target_is_refused_at_the_first_optimizer_step(tmp_path):
    script = WRAPPED_LOOP.replace("return self._forward_module(x)",
                                  "return nanchaos.probe('logits', self._forward_module(x))")
    p = plan(faults=[{"kind": "tensor", "step": 3,
                      "params": {"target": "activation:layer.1", "value": "nan"}}])
    job = run_ranks(tmp_path, script, p, world=1)
    assert job.codes == [1]
    reason = job.of(0, "attach_error")[0]["reason"]
    assert "matches no module of Net nor a probe" in reason, reason
    assert "did you mean activation:layers.1" in reason, reason
    # Refused before the step applied: no iteration ended, no parameter moved.
    assert job.of(0, "step_end") == [] and job.of(0, "inject") == []


def test_an_activation_target_naming_a_probe_is_accepted(tmp_path):
    script = WRAPPED_LOOP.replace("return self._forward_module(x)",
                                  "return nanchaos.probe('logits', self._forward_module(x))")
    p = plan(faults=[{"kind": "tensor", "step": 2,
                      "params": {"target": "activation:logits", "value": "nan", "count": 1}}])
    job = run_ranks(tmp_path, script, p, world=1)
    assert job.codes == [0], job.outputs
    assert [(e["target"], e["step"]) for e in job.of(0, "inject")] == [("activation:logits", 2)]
