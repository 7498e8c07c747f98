"""The agent observes the job's own checkpoints (ckpt_io.py): ``torch.save`` / ``torch.load`` of
training state become ``ckpt_save`` / ``ckpt_load`` events (and ``ckpt_rename`` for an atomic
save), the step rule, and a resumed job's step clock continuing from the loaded step."""

from __future__ import annotations

import textwrap

import pytest

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
    # per-tensor digests: the load restored the bytes of the last save, not of the first
    assert saves[1]["format"] == loads[0]["format"] == "torch"
    assert set(loads[0]["digests"]) >= {"model.head.weight", "model.layers.0.weight"}
    assert loads[0]["digests"] == saves[1]["digests"] != saves[0]["digests"]
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


# --- fault kind checkpoint: the job's own files, corrupted after the observed save ---------------

SAVER = HEADER + textwrap.dedent('''
    DIR = os.environ["CKPT_DIR"]
    if os.environ.get("DDP"):
        dist.init_process_group("gloo")
    model = DDP(Net()) if os.environ.get("DDP") else Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    g = torch.Generator().manual_seed(1)
    for step in range(STEPS):
        x = torch.randn(16, 8, generator=g); y = torch.randint(0, 4, (16,), generator=g)
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
        if (step + 1) % 2 == 0:
            path = os.path.join(DIR, f"ck-{step + 1}.pt")
            torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(),
                        "step": step + 1}, path + ".tmp")
            os.replace(path + ".tmp", path)
    print("params-finite", all(bool(p.isfinite().all()) for p in model.parameters()))
''')


def ckpt_fault(**params):
    return {"kind": "checkpoint", "ranks": [0], "step": params.pop("step", 0), "params": params,
            "given": list(params) + (["step"] if "save" not in params else [])}


def run_saver(tmp_path, fault):
    job = run_ranks(tmp_path, SAVER, plan(steps=6, faults=[fault]), world=1,
                    env={"STEPS": "6", "CKPT_DIR": str(tmp_path)})
    assert job.codes == [0], job.outputs
    assert "params-finite True" in job.outputs[0]  # the job's own state is never touched
    return job


def load(tmp_path, step):
    import torch

    return torch.load(str(tmp_path / f"ck-{step}.pt"))


def test_checkpoint_nan_in_a_parameter_of_the_save_at_a_step(tmp_path):
    import math

    job = run_saver(tmp_path, ckpt_fault(step=4, mode="nan", target="parameter:head.weight"))
    (inj,) = job.of(0, "inject")
    assert inj["kind"] == "checkpoint" and inj["target"] == "parameter:head.weight"
    assert inj["step"] == 4  # the corrupted save's step (the agent was in iteration 3)
    assert inj["detail"]["save_step"] == 4 and inj["detail"]["mode"] == "nan"
    assert inj["detail"]["path"] == str(tmp_path / "ck-4.pt.tmp")  # renamed after the fault
    # the inject comes after its save's ckpt_save, before the rename
    order = [e["ev"] for e in job.events[0] if e["ev"] in ("ckpt_save", "inject", "ckpt_rename")]
    assert order == ["ckpt_save", "ckpt_rename", "ckpt_save", "inject", "ckpt_rename",
                     "ckpt_save", "ckpt_rename"]
    bad = load(tmp_path, 4)
    w = bad["model"]["head.weight"].flatten()
    assert math.isnan(w[0]) and bool(w[1:].isfinite().all())
    assert bad["step"] == 4 and set(bad) == {"model", "optimizer", "step"}
    for step in (2, 6):
        assert all(bool(t.isfinite().all()) for t in load(tmp_path, step)["model"].values())


def test_checkpoint_bitflip_in_optimizer_state_by_save_number(tmp_path):
    job = run_saver(tmp_path, ckpt_fault(save=1, mode="bitflip", bit=30,
                                         target="optimizer:layers.0.weight.momentum_buffer"))
    (inj,) = job.of(0, "inject")
    assert inj["target"] == "optimizer:layers.0.weight.momentum_buffer"
    assert inj["detail"]["save_step"] == 2
    good_model = load(tmp_path, 2)["model"]
    state = load(tmp_path, 2)["optimizer"]["state"]
    # parameter id 0 is layers.0.weight: its first element's exponent's top bit flipped (a
    # small momentum becomes ~1e36)
    hit = state[0]["momentum_buffer"].flatten()
    assert abs(hit[0].item()) > 1e30 and abs(float(inj["detail"]["before"])) < 10
    assert hit[0].item() == pytest.approx(float(inj["detail"]["after"]), rel=1e-5)
    assert bool(hit[1:].isfinite().all()) and abs(hit[1:]).max().item() < 10
    assert all(bool(t.isfinite().all()) for t in good_model.values())
    assert all(bool(s["momentum_buffer"].isfinite().all()) for i, s in state.items() if i != 0)


def test_checkpoint_truncate_delete_and_stale(tmp_path):
    import os

    (tmp_path / "t").mkdir()
    run_saver(tmp_path / "t", ckpt_fault(step=4, mode="truncate"))
    sizes = {s: os.path.getsize(tmp_path / "t" / f"ck-{s}.pt") for s in (2, 4, 6)}
    assert sizes[4] == sizes[2] // 2 and sizes[6] == sizes[2]

    (tmp_path / "d").mkdir()
    job = run_saver(tmp_path / "d", ckpt_fault(step=4, mode="delete"))
    assert sorted(os.listdir(tmp_path / "d")) == ["ck-2.pt", "ck-6.pt", "job.py", "rank-0.jsonl"]
    assert [e["detail"]["mode"] for e in job.of(0, "inject")] == ["delete"]

    (tmp_path / "s").mkdir()
    job = run_saver(tmp_path / "s", ckpt_fault(step=4, mode="stale"))
    assert (tmp_path / "s" / "ck-4.pt").read_bytes() == (tmp_path / "s" / "ck-2.pt").read_bytes()
    assert job.of(0, "inject")[0]["detail"]["from"] == str(tmp_path / "s" / "ck-2.pt")


def test_checkpoint_fault_under_ddp_hits_the_saving_rank_only(tmp_path):
    # DDP's state dict names carry the wrapper's `module.` prefix; both ranks save here (to
    # their own folders), the fault names rank 1.
    import math

    script = SAVER.replace('os.environ["CKPT_DIR"]', 'os.path.join(os.environ["CKPT_DIR"], '
                           'os.environ["RANK"])')
    for r in range(2):
        (tmp_path / str(r)).mkdir()
    fault = ckpt_fault(step=2, mode="inf", target="parameter:layers.0.bias")
    fault["ranks"] = [1]
    job = run_ranks(tmp_path, script, plan(steps=6, faults=[fault]),
                    env={"STEPS": "6", "CKPT_DIR": str(tmp_path), "DDP": "1"})
    assert job.codes == [0, 0], job.outputs
    assert job.of(0, "inject") == [] and len(job.of(1, "inject")) == 1
    import torch

    b1 = torch.load(str(tmp_path / "1" / "ck-2.pt"))["model"]["module.layers.0.bias"]
    b0 = torch.load(str(tmp_path / "0" / "ck-2.pt"))["model"]["module.layers.0.bias"]
    assert math.isinf(b1[0]) and bool(b0.isfinite().all())
