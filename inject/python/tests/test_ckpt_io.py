"""The agent observes the job's own checkpoints (ckpt_io.py): ``torch.save`` / ``torch.load`` of
training state become ``ckpt_save`` / ``ckpt_load`` events (and ``ckpt_rename`` for an atomic
save), the step rule, and a resumed job's step clock continuing from the loaded step."""

from __future__ import annotations

import textwrap

from ranks import run_ranks
from test_agent import HEADER, plan

# One process: train, saving atomically after every 2nd step; or resume from the newest file
# and train on. Anything that is not training state (a list of ints) is never reported.
SCRIPT = HEADER + textwrap.dedent('''
    CKPT = os.environ["CKPT"]
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    start = 0
    if os.path.exists(CKPT):
        state = torch.load(CKPT)
        model.load_state_dict(state["model"]); opt.load_state_dict(state["optimizer"])
        start = state["step"]
    torch.save([1, 2, 3], CKPT + ".other")
    g = torch.Generator().manual_seed(1)
    for step in range(start, STEPS):
        x = torch.randn(16, 8, generator=g); y = torch.randint(0, 4, (16,), generator=g)
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
        if (step + 1) % 2 == 0:
            torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(),
                        "step": step + 1}, CKPT + ".tmp")
            os.replace(CKPT + ".tmp", CKPT)
''')


def test_saves_renames_and_resume(tmp_path):
    ckpt = str(tmp_path / "ck.pt")
    first = run_ranks(tmp_path, SCRIPT, plan(steps=6), world=1,
                      env={"STEPS": "5", "CKPT": ckpt})
    saves = first.of(0, "ckpt_save")
    assert [(e["path"], e["step"], e["agent_step"]) for e in saves] == [
        (ckpt + ".tmp", 2, 2), (ckpt + ".tmp", 4, 4)]
    assert all(e["tensors"] > 0 for e in saves)
    assert [(e["from"], e["path"]) for e in first.of(0, "ckpt_rename")] == [
        (ckpt + ".tmp", ckpt)] * 2
    assert first.of(0, "ckpt_load") == []

    # The relaunch loads the checkpoint at step 4: the agent numbers its first iteration 4.
    second = run_ranks(tmp_path, SCRIPT, plan(steps=6), world=1,
                       env={"STEPS": "6", "CKPT": ckpt})
    loads = second.of(0, "ckpt_load")
    assert [(e["path"], e["step"]) for e in loads] == [(ckpt, 4)]
    assert [e["step"] for e in second.of(0, "step_begin")] == [4, 5]
    assert [e["step"] for e in second.of(0, "step_end")] == [4, 5]
    assert second.of(0, "final")[0]["steps_completed"] == 6


def test_step_rule():
    import torch
    from nanchaos.ckpt_io import step_of, training_state

    assert step_of({"step": 7}) == 7
    assert step_of({"global_step": torch.tensor(9)}) == 9
    assert step_of({"iteration": 3, "step": True}) == 3  # a bool is no step
    assert step_of({"epoch": 2}) is None
    assert step_of({"step": torch.tensor(1.5)}) is None
    assert training_state({"w": torch.zeros(2), "step": 1}) == (1, 1)
    assert training_state({"model": {"a": torch.zeros(1), "b": torch.zeros(1)}}) == (2, None)
    assert training_state([torch.zeros(1)]) == (0, None)
