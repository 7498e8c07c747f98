"""The agent observes the job's torch.distributed.checkpoint (DCP) saves and loads (dcp_io.py):
``ckpt_save`` / ``ckpt_load`` with the folder, the step, this rank's shard and per-tensor
digests, ``ckpt_reject`` for a load that raised; and fault kind ``checkpoint`` on a DCP shard
(truncate, delete, stale, and nan into a tensor found through DCP's metadata).

Runs on torch 2.x (``torch.distributed.checkpoint.save``/``load`` with ``checkpoint_id``; with
``OLD=1`` the deprecated ``save_state_dict``/``load_state_dict``) and on a torch 1.13 whose
``torch.distributed._shard.checkpoint`` imports (``save_state_dict``/``load_state_dict`` with a
FileSystemWriter/Reader, the API it has). Debian's torch 1.13 under Python 3.11 cannot import
it (a dataclass field with a mutable default, which Python 3.11 refuses): no job there can use
DCP, and the job-level cases are skipped."""

from __future__ import annotations

import os
import textwrap
import zlib

import pytest

from ranks import run_ranks
from test_agent import HEADER, plan
from test_ckpt_io import ckpt_fault

# Two DDP ranks; MODE=train saves a DCP checkpoint of the (unwrapped) model's flat state dict
# plus "step" after every 2nd step into DIR/step-<s>; MODE=load loads DIR/step-$LOAD into fresh
# tensors, resumes training from it and reports what it loaded.
SCRIPT = HEADER + textwrap.dedent('''
    import math, warnings, zlib
    warnings.simplefilter("ignore")
    DIR, MODE = os.environ["CKPT_DIR"], os.environ.get("MODE", "train")
    try:
        import torch.distributed.checkpoint as dcp
        NEW = hasattr(dcp, "save") and not os.environ.get("OLD")
    except ImportError:  # torch 1.13: DCP lives in torch.distributed._shard.checkpoint
        from torch.distributed._shard import checkpoint as dcp
        NEW = False

    def save(sd, path):
        if NEW:
            dcp.save(sd, checkpoint_id=path)
        else:
            dcp.save_state_dict(sd, dcp.FileSystemWriter(path, single_file_per_rank=True))

    def load(sd, path):
        if NEW:
            dcp.load(sd, checkpoint_id=path)
        else:
            dcp.load_state_dict(sd, dcp.FileSystemReader(path))

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    net = Net()
    model = DDP(net)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    start = 0
    if MODE == "load":
        sd = {k: torch.zeros_like(v) for k, v in net.state_dict().items()}
        sd["step"] = 0
        try:
            load(sd, os.path.join(DIR, "step-" + os.environ["LOAD"]))
        except (Exception, dcp.CheckpointException) as e:  # the latter is a BaseException
            print("load-failed", type(e).__name__, flush=True)
            sys.exit(3)
        w = sd["head.weight"].flatten()
        print("loaded step", sd["step"], "head0-nan", math.isnan(w[0]),
              "rest-finite", bool(w[1:].isfinite().all()), flush=True)
        raw = sd["head.weight"].contiguous().view(-1).view(torch.uint8).numpy().tobytes()
        print(f"crc head.weight {zlib.crc32(raw):08x}", flush=True)
        net.load_state_dict({k: v for k, v in sd.items() if k != "step"})
        start = sd["step"]
    g = torch.Generator().manual_seed(rank)
    for step in range(start, STEPS):
        x = torch.randn(16, 8, generator=g); y = torch.randint(0, 4, (16,), generator=g)
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
        if MODE == "train" and (step + 1) % 2 == 0:
            sd = dict(net.state_dict())
            sd["step"] = step + 1
            save(sd, os.path.join(DIR, f"step-{step + 1}"))
    dist.destroy_process_group()
''')


def _dcp_importable() -> bool:
    for name in ("torch.distributed.checkpoint", "torch.distributed._shard.checkpoint"):
        try:
            __import__(name)
            return True
        except Exception:
            continue
    return False


needs_dcp = pytest.mark.skipif(not _dcp_importable(),
                               reason="this torch cannot import torch.distributed.checkpoint")


def crc(t) -> str:
    """The test's own CRC-32 of a tensor's bytes (contiguous, host)."""
    import torch

    b = t.detach().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
    return f"{zlib.crc32(b):08x}"


def run(tmp_path, faults=(), **env):
    e = {"STEPS": "6", "CKPT_DIR": str(tmp_path / "ck")}
    e.update({k: str(v) for k, v in env.items()})
    return run_ranks(tmp_path, SCRIPT, plan(steps=6, faults=list(faults)), env=e)


@needs_dcp
@pytest.mark.parametrize("old", ["", "1"])
def test_dcp_save_and_load_events_path_step_shard_digests(tmp_path, old):
    import importlib.util

    if old and importlib.util.find_spec("torch.distributed.checkpoint") is None:
        pytest.skip("torch 1.13: one DCP API (save_state_dict), run without OLD")
    first = run(tmp_path, OLD=old)
    assert first.codes == [0, 0], first.outputs
    folder = str(tmp_path / "ck" / "step-4")
    for r in range(2):
        saves = first.of(r, "ckpt_save")
        assert [(e["path"], e["step"], e["agent_step"], e["format"], e["rank"]) for e in saves] \
            == [(str(tmp_path / "ck" / f"step-{s}"), s, s, "dcp", r) for s in (2, 4, 6)]
        for e in saves:
            assert e["shard"] == [f"__{r}_0.distcp"]
            assert e["shard_bytes"] == os.path.getsize(os.path.join(e["path"], e["shard"][0]))
            assert e["tensors"] == 6 and len(e["digests"]) == 6
        assert saves[0]["digests"] != saves[1]["digests"]  # training moved the weights
        # DCP's own per-tensor torch.save calls are not training-state events
        assert first.of(r, "ckpt_load") == [] and first.of(r, "ckpt_rename") == []
    assert first.of(0, "ckpt_save")[1]["digests"] == first.of(1, "ckpt_save")[1]["digests"]

    # The relaunch loads step-4 into fresh tensors: the agent reports the folder, the step DCP
    # loaded into the state dict, the same digests as the save, and numbers the first
    # iteration 4.
    second = run(tmp_path, OLD=old, MODE="load", LOAD=4)
    assert second.codes == [0, 0], second.outputs
    for r in range(2):
        (ld,) = second.of(r, "ckpt_load")
        assert (ld["path"], ld["step"], ld["format"], ld["rank"]) == (folder, 4, "dcp", r)
        assert ld["digests"] == first.of(r, "ckpt_save")[1]["digests"]
        assert [e["step"] for e in second.of(r, "step_begin")] == [4, 5]
    # ... and a digest is the CRC-32 of the tensor's bytes, as the job computes it itself
    digests = first.of(0, "ckpt_save")[1]["digests"]
    assert "loaded step 4 head0-nan False" in second.outputs[0], second.outputs[0]
    assert f"crc head.weight {digests['head.weight']}" in second.outputs[0]
    assert set(digests) == {"layers.0.weight", "layers.0.bias", "layers.2.weight",
                            "layers.2.bias", "head.weight", "head.bias"}
    assert all(len(d) == 8 and int(d, 16) >= 0 for d in digests.values())


def test_dcp_digest_is_crc32_of_the_bytes():
    import torch

    from nanchaos.ckpt_io import state_digests, tensor_digest
    from nanchaos.dcp_io import named_tensors

    t = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    assert tensor_digest(t) == crc(t)
    assert tensor_digest(t.t()) == crc(t.t().contiguous())  # the values, row-major
    assert tensor_digest(t.to(torch.bfloat16)) == crc(t.to(torch.bfloat16))
    bumped = t.clone()
    bumped.view(-1)[5] = torch.nextafter(bumped.view(-1)[5], torch.tensor(100.0))
    assert tensor_digest(bumped) != tensor_digest(t)  # one ulp
    assert tensor_digest(torch.zeros(0)) == "00000000"

    class App:  # a torch.distributed.checkpoint.stateful.Stateful
        def state_dict(self):
            return {"w": t}

        def load_state_dict(self, sd):
            pass

    named = named_tensors({"app": App(), "opt": {"state": {"w": {"m": t}}}, "lst": [t, 3],
                           "step": 5})
    assert [n for n, _ in named] == ["app.w", "opt.state.w.m", "lst.0"]
    # torch.save events: the top two levels and an optimizer's per-parameter state
    assert state_digests({"model": {"w": t}, "optimizer": {"state": {0: {"m": t}}},
                          "step": 1}) == {"model.w": crc(t), "optimizer.state.0.m": crc(t)}


@needs_dcp
def test_dcp_truncated_shard_fails_the_load_on_every_rank(tmp_path):
    # Rank 0's shard: torch 1.13's planner writes every replicated tensor there (2.x spreads
    # them over the ranks; either way rank 0's shard holds tensors every rank loads).
    job = run(tmp_path, [ckpt_fault(step=4, mode="truncate")])
    assert job.codes == [0, 0], job.outputs
    assert job.of(1, "inject") == []
    (inj,) = job.of(0, "inject")
    assert inj["step"] == 4 and inj["target"] == ""
    d = inj["detail"]
    assert (d["mode"], d["shard"], d["files"], d["save_step"]) == (
        "truncate", 0, ["__0_0.distcp"], 4)
    ck = tmp_path / "ck"
    full = os.path.getsize(ck / "step-2" / "__0_0.distcp")
    assert full > 0 and d["bytes"] == full and d["kept"] == full // 2
    assert os.path.getsize(ck / "step-4" / "__0_0.distcp") == full // 2
    assert os.path.getsize(ck / "step-6" / "__0_0.distcp") == full
    assert os.path.getsize(ck / "step-4" / "__1_0.distcp") == os.path.getsize(
        ck / "step-2" / "__1_0.distcp")
    # the inject comes after that save's ckpt_save on rank 0
    evs = [(e["ev"], e.get("step")) for e in job.events[0] if e["ev"] in ("ckpt_save", "inject")]
    assert evs == [("ckpt_save", 2), ("ckpt_save", 4), ("inject", 4), ("ckpt_save", 6)]

    # DCP's own loader cannot read it, on either rank: the agent writes ckpt_reject, no load
    again = run(tmp_path, MODE="load", LOAD=4)
    assert again.codes == [3, 3], again.outputs
    for r in range(2):
        (rej,) = again.of(r, "ckpt_reject")
        assert rej["path"] == str(ck / "step-4") and rej["format"] == "dcp" and rej["why"]
        assert rej["step"] is None and rej["rank"] == r
        assert again.of(r, "ckpt_load") == []


@needs_dcp
def test_dcp_delete_and_stale_shard(tmp_path):
    (tmp_path / "d").mkdir()
    job = run(tmp_path / "d", [ckpt_fault(step=4, mode="delete")])
    assert job.codes == [0, 0], job.outputs
    assert [e["detail"]["mode"] for e in job.of(0, "inject")] == ["delete"]
    assert job.of(1, "inject") == []
    ck = tmp_path / "d" / "ck"
    assert sorted(os.listdir(ck / "step-4")) == [".metadata", "__1_0.distcp"]
    assert sorted(os.listdir(ck / "step-6")) == [".metadata", "__0_0.distcp", "__1_0.distcp"]
    again = run(tmp_path / "d", MODE="load", LOAD=4)
    assert again.codes == [3, 3], again.outputs
    assert len(again.of(0, "ckpt_reject")) == 1

    (tmp_path / "s").mkdir()
    job = run(tmp_path / "s", [dict(ckpt_fault(save=3, mode="stale"), ranks=[0, 1])])
    assert job.codes == [0, 0], job.outputs
    ck = tmp_path / "s" / "ck"
    for r in range(2):
        (inj,) = job.of(r, "inject")
        assert inj["step"] == 6 and inj["detail"]["from"] == str(ck / "step-4")
        name = f"__{r}_0.distcp"
        assert (ck / "step-6" / name).read_bytes() == (ck / "step-4" / name).read_bytes()
    name = "__0_0.distcp"
    assert (ck / "step-4" / name).read_bytes() != (ck / "step-2" / name).read_bytes()
    # the stale shards load (DCP cannot tell): the relaunch gets step 6's folder with the
    # tensors of the save at step 4, whose digests the agent reports
    again = run(tmp_path / "s", MODE="load", LOAD=6)
    assert again.codes == [0, 0], again.outputs
    (ld,) = again.of(0, "ckpt_load")
    assert ld["path"] == str(ck / "step-6")
    saved = job.of(0, "ckpt_save")
    assert ld["digests"] == saved[1]["digests"] != saved[2]["digests"]


@needs_dcp
def test_dcp_nan_into_a_tensor_of_the_shard_that_holds_it(tmp_path):
    # Which rank's shard holds head.weight is DCP's choice (deduplication); ranks = [0, 1]
    # lets the fault act on whichever does, once.
    (tmp_path / "a").mkdir()
    fault = dict(ckpt_fault(step=4, mode="nan", target="parameter:head.weight"), ranks=[0, 1])
    job = run(tmp_path / "a", [fault])
    assert job.codes == [0, 0], job.outputs
    injs = job.of(0, "inject") + job.of(1, "inject")
    assert len(injs) == 1, injs
    (inj,) = injs
    owner = inj["detail"]["shard"]
    assert inj["target"] == "parameter:head.weight" and inj["detail"]["fqn"] == "head.weight"
    assert inj["detail"]["file"] == f"__{owner}_0.distcp" and inj["detail"]["after"] == "nan"
    # DCP's own loader reads the NaN back on every rank; the rest of the tensor is intact
    again = run(tmp_path / "a", MODE="load", LOAD=4)
    assert again.codes == [0, 0], again.outputs
    for out in again.outputs:
        assert "loaded step 4 head0-nan True rest-finite True" in out, out

    # The same target on a rank whose shard does not hold it: the job fails at the save,
    # naming the rank to give.
    (tmp_path / "b").mkdir()
    job = run(tmp_path / "b", [dict(fault, ranks=[1 - owner])])
    assert job.codes[1 - owner] != 0
    assert f"give ranks = [{owner}]" in job.outputs[1 - owner]
