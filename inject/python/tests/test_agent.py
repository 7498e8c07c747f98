"""The Python agent on real jobs: each test runs a small training script as real processes (gloo
process groups on CPU where collectives matter) with the environment ``nanchaos exec-rank`` sets,
and asserts on the events the agent wrote (the same evidence the judge reads)."""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from ranks import AGENT_DIR, run_ranks

HEADER = textwrap.dedent('''
    import os, sys, torch, torch.nn as nn, torch.nn.functional as F
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    import nanchaos
    torch.manual_seed(0)
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 16))
            self.head = nn.Linear(16, 4)
        def forward(self, x):
            return self.head(self.layers(x))
    STEPS = int(os.environ.get("STEPS", "6"))
''')

DDP_LOOP = HEADER + textwrap.dedent('''
    dist.init_process_group("gloo")
    model = DDP(Net())
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(dist.get_rank())
    for step in range(STEPS):
        x = torch.randn(16, 8, generator=g); y = torch.randint(0, 4, (16,), generator=g)
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
    dist.destroy_process_group()
''')

SOLO_LOOP = HEADER + textwrap.dedent('''
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(1)
    for step in range(STEPS):
        x = torch.randn(16, 8, generator=g); y = torch.randint(0, 4, (16,), generator=g)
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
''')


def plan(steps=6, faults=(), micro_batches=1, **kw):
    p = {"version": 1, "scenario": "t", "seed": 0, "steps": steps, "micro_batches": micro_batches,
         "faults": [], **kw}
    for i, f in enumerate(faults):
        spec = {"index": i, "ranks": [0], "repeat": 1, "probability": 1.0, "persistent": False,
                "params": {}, "given": []}
        spec.update(f)
        spec["given"] = spec["given"] or list(spec["params"])
        p["faults"].append(spec)
    return p


def steps_of(job, rank):
    return [(e["step"], e["action"]) for e in job.of(rank, "step_end")]


def injections(job, rank):
    return job.of(rank, "inject")


# --- attach and the step clock -------------------------------------------------------------------

def test_clean_ddp_run_attaches_logs_every_step_and_ends_with_equal_digests(tmp_path):
    job = run_ranks(tmp_path, DDP_LOOP, plan())
    assert job.codes == [0, 0], job.outputs
    for r in range(2):
        start = job.of(r, "start")[0]
        assert start["ddp"] is True and start["rank"] == r
        assert "layers.0" in start["modules"] and "head" in start["modules"]
        assert "module.head.weight" not in start["parameters"]
        assert "layers.0.weight" in start["parameters"]
        assert steps_of(job, r) == [(s, "update") for s in range(6)]
        assert [e["code"] for e in job.of(r, "exit")] == [0]
    f0, f1 = job.of(0, "final")[0], job.of(1, "final")[0]
    assert f0["steps_completed"] == 6 and f0["params_finite"] is True
    assert f0["params_hash"] == f1["params_hash"] and f0["optim_hash"] == f1["optim_hash"]
    assert math.isfinite(f0["eval_loss"]) and math.isfinite(f0["initial_eval_loss"])
    # One bucket all-reduce per step, entered and left, same sequence numbers on both ranks; the
    # default hook's own dist.all_reduce is not logged twice.
    for r in range(2):
        enters = job.of(r, "coll_enter")
        assert [e["name"] for e in enters] == ["grad_allreduce"] * 6
        assert [e["seq"] for e in enters] == list(range(6))
        assert {e["seq"] for e in job.of(r, "coll_leave")} == set(range(6))


def test_without_bucket_faults_the_gradient_all_reduce_is_logged_around_backward(tmp_path):
    # No bucket fault planned: the agent registers no comm hook (a Python hook costs every step
    # ~0.1 ms on torch 2.x); each backward of a syncing DDP forward is one grad_allreduce that
    # spans the backward. no_sync() micro-batches all-reduce nothing and log nothing. A backward
    # whose all-reduce fails (the peer died) leaves it with status error.
    script = HEADER + textwrap.dedent('''
        import datetime
        dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=3))
        model = DDP(Net())
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        g = torch.Generator().manual_seed(dist.get_rank())
        for step in range(4):
            if step == 3 and dist.get_rank() == 1:
                os._exit(9)
            for micro in range(2):
                x = torch.randn(8, 8, generator=g); y = torch.randint(0, 4, (8,), generator=g)
                if micro == 0:
                    with model.no_sync():
                        (F.cross_entropy(model(x), y) / 2).backward()
                else:
                    (F.cross_entropy(model(x), y) / 2).backward()
            opt.step(); opt.zero_grad()
            print("hook", model._nanchaos_hooked)
    ''')
    job = run_ranks(tmp_path, script, plan(steps=4, micro_batches=2), timeout=60)
    assert job.codes[1] == 9 and job.codes[0] != 0, job.outputs
    assert "hook False" in job.outputs[0]
    n_grads = (8 * 16 + 16) + (16 * 16 + 16) + (16 * 4 + 4)
    for r in range(2):
        enters = job.of(r, "coll_enter")
        assert [(e["seq"], e["name"], e["step"], e["span"], e["count"]) for e in enters] == [
            (s, "grad_allreduce", s, "backward", n_grads) for s in range(3 if r else 4)]
    assert [(e["seq"], e["status"]) for e in job.of(1, "coll_leave")] == [(s, "ok") for s in range(3)]
    assert [(e["seq"], e["status"]) for e in job.of(0, "coll_leave")] == [
        (0, "ok"), (1, "ok"), (2, "ok"), (3, "error")]


def test_step_clock_ignores_eval_and_no_grad_forwards_and_counts_micro_batches(tmp_path):
    script = HEADER + textwrap.dedent('''
        model = Net()
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        g = torch.Generator().manual_seed(1)
        def evaluate():
            model.eval()
            with torch.no_grad():
                for _ in range(3):
                    model(torch.randn(4, 8, generator=g))
            model.train()
        for it in range(5):
            if it % 2 == 0:
                evaluate()
            with torch.no_grad():
                model(torch.randn(4, 8, generator=g))   # a no_grad forward in train mode
            for micro in range(4):
                x = torch.randn(8, 8, generator=g); y = torch.randint(0, 4, (8,), generator=g)
                (F.cross_entropy(model(x), y) / 4).backward()
            opt.step(); opt.zero_grad()
    ''')
    job = run_ranks(tmp_path, script, plan(steps=5, micro_batches=4), world=1)
    assert job.codes == [0], job.outputs
    assert steps_of(job, 0) == [(s, "update") for s in range(5)]
    assert job.of(0, "start")[0]["ddp"] is False
    assert job.of(0, "final")[0]["steps_completed"] == 5


def test_early_continue_is_observed_as_a_skip_and_reports_are_logged(tmp_path):
    script = HEADER + textwrap.dedent('''
        model = Net()
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        g = torch.Generator().manual_seed(1)
        for step in range(6):
            x = torch.randn(16, 8, generator=g); y = torch.randint(0, 4, (16,), generator=g)
            opt.zero_grad()
            loss = F.cross_entropy(model(x), y)
            if not torch.isfinite(loss):
                nanchaos.report_detection("loss_check", cause="loss_math")
                nanchaos.report_decision("skip_step")
                continue
            loss.backward()
            opt.step()
    ''')
    p = plan(faults=[{"kind": "tensor", "step": 2, "params": {"target": "loss", "value": "nan"}}])
    job = run_ranks(tmp_path, script, p, world=1)
    assert job.codes == [0], job.outputs
    assert steps_of(job, 0) == [(0, "update"), (1, "update"), (2, "skip"), (3, "update"),
                                (4, "update"), (5, "update")]
    dets = job.of(0, "detect")
    assert [(d["detector"], d["step"], d["source"]) for d in dets] == [
        ("loss_check", 2, "stack"), ("observed:skip", 2, "observed")]
    assert dets[0]["cause"] == "loss_math"
    assert [(d["step"], d["action"]) for d in job.of(0, "decision")] == [(2, "skip_step")]
    assert [i["target"] for i in injections(job, 0)] == ["loss"]


def test_two_models_without_attach_fail_loudly_and_attach_resolves_them(tmp_path):
    two = HEADER + textwrap.dedent('''
        dist.init_process_group("gloo")
        a, b = DDP(Net()), DDP(Net())
        opt = torch.optim.SGD(list(a.parameters()) + list(b.parameters()), lr=0.1)
        if os.environ.get("ATTACH"):
            nanchaos.attach(a, opt)
        for step in range(2):
            x = torch.randn(4, 8)
            (a(x).sum() + b(x).sum()).backward(); opt.step(); opt.zero_grad()
        dist.destroy_process_group()
    ''')
    job = run_ranks(tmp_path, two, plan(steps=2))
    assert job.codes[0] != 0
    errors = job.of(0, "attach_error")
    assert errors and "2 candidates" in errors[0]["reason"] and "nanchaos.attach" in errors[0]["reason"]
    assert "cannot tell which model" in job.outputs[0]
    job = run_ranks(tmp_path, two, plan(steps=2), env={"ATTACH": "1"})
    assert job.codes == [0, 0], job.outputs
    assert steps_of(job, 0) == [(0, "update"), (1, "update")]


def test_uncaught_exception_is_observed_with_its_message(tmp_path):
    script = SOLO_LOOP + "raise RuntimeError('boom at the end')\n"
    job = run_ranks(tmp_path, script, plan(), world=1)
    assert job.codes == [1]
    exc = job.of(0, "exception")
    assert exc and exc[0]["message"] == "RuntimeError: boom at the end"
    assert [d["detector"] for d in job.of(0, "detect")] == ["observed:exception"]
    assert job.of(0, "final") == []  # an exception is not a clean end
    assert [e["code"] for e in job.of(0, "exit")] == [1]


def test_without_the_harness_every_call_is_a_no_op(tmp_path):
    script = textwrap.dedent('''
        import torch, nanchaos
        t = torch.ones(3)
        assert nanchaos.probe("x", t) is t
        nanchaos.report_detection("c", layer="l", cause="data")
        nanchaos.report_decision("skip_step")
        nanchaos.attach(torch.nn.Linear(2, 2))
        assert not nanchaos.active()
        print("ok")
    ''')
    job = run_ranks(tmp_path, script, None, world=1)
    assert job.codes == [0] and "ok" in job.outputs[0]
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".jsonl")]


# --- faults -------------------------------------------------------------------------------------

def test_activation_nan_on_one_rank_reaches_every_rank_through_the_all_reduce(tmp_path):
    script = DDP_LOOP.replace("opt.step()", "opt.step()\n    print('grad-finite', all(bool(torch.isfinite(p.grad).all()) for p in model.parameters()))")
    p = plan(faults=[{"kind": "tensor", "ranks": [1], "step": 3,
                      "params": {"target": "activation:layers.0", "value": "nan", "count": 1}}])
    job = run_ranks(tmp_path, script, p)
    assert job.codes == [0, 0], job.outputs
    inj = injections(job, 1)
    assert [(i["target"], i["step"], i["detail"]["after"]) for i in inj] == [
        ("activation:layers.0", 3, "nan")]
    assert injections(job, 0) == []
    for r in range(2):
        flags = [ln for ln in job.outputs[r].splitlines() if ln.startswith("grad-finite")]
        assert flags[3] == "grad-finite False" and flags[2] == "grad-finite True"


def test_parameter_gradient_and_bitflip_faults_change_the_named_tensors(tmp_path):
    script = SOLO_LOOP.replace("opt.step()", "opt.step()\n    print('w', step, model.head.weight.view(-1)[:4].tolist())")
    p = plan(faults=[
        {"kind": "tensor", "step": 1, "params": {"target": "parameter:head.bias", "value": 7.0}},
        {"kind": "tensor", "step": 2, "params": {"target": "gradient:layers.*.weight", "value": "inf"}},
        {"kind": "bitflip", "step": 3, "params": {"target": "parameter:head.weight", "bit": 30, "count": 1}},
    ])
    job = run_ranks(tmp_path, script, p, world=1)
    assert job.codes == [0], job.outputs
    got = [(i["step"], i["target"]) for i in injections(job, 0)]
    # Gradient hooks fire in backward order: layers.2 before layers.0.
    assert got == [(1, "parameter:head.bias"), (2, "gradient:layers.2.weight"),
                   (2, "gradient:layers.0.weight"), (3, "parameter:head.weight")]
    inj = injections(job, 0)
    assert inj[0]["detail"]["after"] == "7"
    assert inj[1]["detail"]["after"] == "inf"
    before, after = float(inj[3]["detail"]["before"]), float(inj[3]["detail"]["after"])
    assert abs(after) > 1e30 or abs(after) < 1e-30, (before, after)  # top exponent bit flipped
    # The SGD step after the inf gradient made layers.0.weight non-finite.
    assert job.of(0, "final")[0]["params_finite"] is False


def test_lr_fault_multiplies_the_jobs_own_schedule_at_the_step_and_restores_it(tmp_path):
    script = HEADER + textwrap.dedent('''
        model = Net()
        opt = torch.optim.SGD(model.parameters(), lr=1.0)
        for it in range(5):
            for group in opt.param_groups:
                group["lr"] = 0.01 * (it + 1)           # the job's own schedule
            model(torch.randn(4, 8)).sum().backward()
            opt.step(); opt.zero_grad()
            print("lr-after", opt.param_groups[0]["lr"])
    ''')
    p = plan(steps=5, faults=[{"kind": "lr", "step": 2, "repeat": 2, "params": {"factor": 1000.0}}])
    job = run_ranks(tmp_path, script, p, world=1)
    assert job.codes == [0], job.outputs
    lrs = [round(e["lr"], 6) for e in job.of(0, "step_end")]
    assert lrs == [0.01, 0.02, 30.0, 40.0, 0.05]
    after = [float(ln.split()[1]) for ln in job.outputs[0].splitlines() if ln.startswith("lr-after")]
    assert [round(v, 6) for v in after] == [0.01, 0.02, 0.03, 0.04, 0.05]
    assert [i["step"] for i in injections(job, 0)] == [2, 3]


def test_batch_overflow_and_probe_faults(tmp_path):
    script = HEADER + textwrap.dedent('''
        model = Net()
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        for it in range(4):
            x = torch.randn(6, 8)
            h = model.layers(x)
            h = nanchaos.probe("mid", h)
            out = model.head(h) if False else model(x)
            print("x-finite", bool(torch.isfinite(x).all()))
            F.mse_loss(out, torch.zeros_like(out)).backward(); opt.step(); opt.zero_grad()
    ''')
    p = plan(steps=4, faults=[
        {"kind": "batch", "step": 1, "params": {"field": "inputs", "value": "nan", "count": 2}},
        {"kind": "overflow", "step": 2, "params": {"target": "activation:layers.2", "factor": 1e5}},
        {"kind": "batch", "step": 3, "params": {"field": "inputs", "mode": "constant_column", "column": 3, "value": "nan"}},
    ])
    job = run_ranks(tmp_path, script, p, world=1)
    assert job.codes == [0], job.outputs
    got = [(i["step"], i["kind"], i["target"]) for i in injections(job, 0)]
    assert got == [(1, "batch", "inputs"), (2, "overflow", "activation:layers.2"),
                   (3, "batch", "inputs")]
    # The job's own batch tensor is not poisoned: the model got a corrupted copy.
    assert all(ln == "x-finite True" for ln in job.outputs[0].splitlines() if ln.startswith("x-finite"))
    assert [e["name"] for e in job.of(0, "probe")] == ["mid"]


def test_comm_fault_hits_the_bucket_and_the_jobs_own_comm_hook_still_runs(tmp_path):
    script = HEADER + textwrap.dedent('''
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
        dist.init_process_group("gloo")
        model = DDP(Net())
        calls = []
        def my_hook(state, bucket):
            calls.append(bucket.index())
            return default_hooks.allreduce_hook(state, bucket)
        model.register_comm_hook(None, my_hook)
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        for step in range(4):
            model(torch.randn(4, 8)).sum().backward()
            print("grad-finite", all(bool(torch.isfinite(p.grad).all()) for p in model.parameters()))
            opt.step(); opt.zero_grad()
        print("hook-calls", len(calls))
        dist.destroy_process_group()
    ''')
    p = plan(steps=4, faults=[{"kind": "comm", "ranks": [0], "step": 2,
                               "params": {"value": "nan", "count": 1}}])
    job = run_ranks(tmp_path, script, p)
    assert job.codes == [0, 0], job.outputs
    for r in range(2):
        assert "hook-calls 4" in job.outputs[r]
        flags = [ln for ln in job.outputs[r].splitlines() if ln.startswith("grad-finite")]
        assert flags == ["grad-finite True", "grad-finite True", "grad-finite False",
                         "grad-finite False"]  # NaN params after step 2 keep gradients NaN
        assert len(job.of(r, "coll_enter")) == 4
    assert [(i["step"], i["target"]) for i in injections(job, 0)] == [(2, "grad_allreduce")]


def test_hang_and_crash_faults(tmp_path):
    p = plan(faults=[{"kind": "hang", "ranks": [0], "step": 1,
                      "params": {"duration_ms": 400, "where": "step_start", "stall": "host"}},
                     {"kind": "crash", "ranks": [0], "step": 3, "params": {"exit_code": 7}}])
    job = run_ranks(tmp_path, SOLO_LOOP, p, world=1)
    assert job.codes == [7]
    inj = injections(job, 0)
    assert [(i["kind"], i["step"], i["target"]) for i in inj] == [
        ("hang", 1, "step_start"), ("crash", 3, "process")]
    begins = {e["step"]: e["t_us"] for e in job.of(0, "step_begin")}
    hang_t = inj[0]["t_us"]
    ends = {e["step"]: e["t_us"] for e in job.of(0, "step_end")}
    assert ends[1] - hang_t >= 400_000
    assert 3 in begins and 3 not in ends and job.of(0, "exit") == []


@pytest.mark.parametrize("where", ["data", "compute", "backward", "comm"])
def test_slow_fault_delays_its_phase_on_the_hit_rank_and_changes_no_number(tmp_path, where):
    p = plan(steps=5, faults=[{"kind": "slow", "ranks": [1], "step": 1,
                               "params": {"steps": 2, "delay_ms": 200, "where": where}}])
    job = run_ranks(tmp_path, DDP_LOOP, p, env={"STEPS": "5"})
    assert job.codes == [0, 0], job.outputs
    assert injections(job, 0) == []
    assert [(i["kind"], i["step"], i["target"]) for i in injections(job, 1)] == [
        ("slow", 1, where), ("slow", 2, where)]
    # Both ranks take about delay_ms longer on the slowed steps (rank 0 waits in the all-reduce),
    # and the replicas stay bit-identical: a straggler changes no number. The slowed rank's own
    # steps hold the whole delay; the waiting rank's by at least 80 % (on a loaded host it may
    # itself start a step late after the previous all-reduce, and then waits that much less).
    for r, share in ((1, 1.0), (0, 0.8)):
        begins = {e["step"]: e["t_us"] for e in job.of(r, "step_begin")}
        for s in (1, 2):
            assert begins[s + 1] - begins[s] >= share * 200_000, (r, s, begins)
    finals = [job.of(r, "final")[0] for r in range(2)]
    assert finals[0]["params_hash"] == finals[1]["params_hash"]


PHASES = ("data", "compute", "backward", "comm")


def assert_slow_phase_is_own_time(job, where, slowed_rank, slowed_steps, delay_us):
    """The slowed rank's own time grew by the delay in exactly ``where`` on the slowed steps;
    every other rank's own time stayed small in every phase: it waited (``wait_us``)."""
    for r in range(len(job.codes)):
        for e in job.of(r, "step_end"):
            own = e["own_us"]
            assert set(own) == set(PHASES) and e["wait_us"] >= 0, e
            assert all(v >= 0 for v in own.values()) and e.get("run_delay_us", 0) >= 0, e
            if e["step"] == 0:
                continue  # the first iteration allocates and warms up
            slowed = r == slowed_rank and e["step"] in slowed_steps
            for phase in PHASES:
                if slowed and phase == where:
                    # The iteration's run-queue delay is taken from every phase in proportion
                    # to its wall time (phases.py), the slept one included: on a loaded host the
                    # slow phase loses up to run_delay_us of its delay.
                    assert own[phase] + e.get("run_delay_us", 0) >= 0.9 * delay_us, (r, e)
                else:
                    assert own[phase] < 0.3 * delay_us, (r, phase, e)
            if r != slowed_rank and e["step"] in slowed_steps:
                assert e["wait_us"] >= 0.6 * delay_us, (r, e)


@pytest.mark.parametrize("where", PHASES)
def test_slow_fault_is_own_time_of_its_phase_on_the_slowed_rank_and_waiting_on_its_peer(
        tmp_path, where):
    # The straggler's phase times (phases.py): 150 ms in `where` on rank 1 at steps 2 and 3.
    # DDP on CPU: rank 0 waits at the end of its backward for the bucket all-reduce (wait_us),
    # which the agent sees through an autograd final callback, with no comm hook of its own
    # unless the comm fault needs one.
    p = plan(steps=6, faults=[{"kind": "slow", "ranks": [1], "step": 2,
                               "params": {"steps": 2, "delay_ms": 150, "where": where}}])
    job = run_ranks(tmp_path, DDP_LOOP, p, env={"STEPS": "6"})
    assert job.codes == [0, 0], job.outputs
    assert [e["step"] for e in job.of(1, "step_end")] == list(range(6))
    assert_slow_phase_is_own_time(job, where, 1, {2, 3}, 150_000)


def test_hang_before_grad_allreduce_stalls_inside_the_bucket_hook(tmp_path):
    p = plan(steps=3, faults=[{"kind": "hang", "ranks": [1], "step": 1,
                               "params": {"duration_ms": 300, "where": "before_grad_allreduce",
                                          "stall": "host"}}])
    job = run_ranks(tmp_path, DDP_LOOP, p, env={"STEPS": "3"})
    assert job.codes == [0, 0], job.outputs
    inj = injections(job, 1)
    assert [(i["step"], i["target"]) for i in inj] == [(1, "before_grad_allreduce")]
    # Rank 0 entered bucket #1 and waited for rank 1, which entered >= 300 ms after its injection.
    e0 = [e for e in job.of(0, "coll_enter") if e["seq"] == 1][0]
    e1 = [e for e in job.of(1, "coll_enter") if e["seq"] == 1][0]
    l0 = [e for e in job.of(0, "coll_leave") if e["seq"] == 1][0]
    assert e1["t_us"] - inj[0]["t_us"] >= 300_000
    assert l0["t_us"] - e0["t_us"] >= 250_000


# --- refusals -----------------------------------------------------------------------------------

def test_a_fault_the_agent_cannot_apply_faithfully_is_refused_at_start(tmp_path):
    p = plan(micro_batches=2, faults=[{"kind": "tensor", "step": 1,
                                       "params": {"target": "gradient:head.weight", "factor": 10.0}}])
    job = run_ranks(tmp_path, SOLO_LOOP, p, world=1)
    assert job.codes == [2]
    err = job.of(0, "attach_error")
    assert err and "micro_batches = 2" in err[0]["reason"]
    assert job.of(0, "step_begin") == []
    # The reason on stderr too, as the agent's leveled diagnostics print it (log.py).
    assert f"nanchaos rank 0: ERROR: {err[0]['reason']}" in job.outputs[0]


def test_nanchaos_log_info_says_what_the_agent_attached_to(tmp_path):
    job = run_ranks(tmp_path, SOLO_LOOP, plan(), world=1, env={"NANCHAOS_LOG": "info"})
    assert job.codes == [0]
    assert "nanchaos rank 0: INFO: attached to " in job.outputs[0]
    (tmp_path / "quiet").mkdir()
    quiet = run_ranks(tmp_path / "quiet", SOLO_LOOP, plan(), world=1)
    assert "nanchaos rank 0" not in quiet.outputs[0]  # default level warn: nothing on a clean run


def test_comm_fault_without_ddp_is_refused_at_attach(tmp_path):
    p = plan(faults=[{"kind": "comm", "step": 1, "params": {"value": "nan", "count": 1}}])
    job = run_ranks(tmp_path, SOLO_LOOP, p, world=1)
    assert job.codes == [1]
    err = job.of(0, "attach_error")
    assert err and "no DistributedDataParallel model" in err[0]["reason"]


ADAM_LOOP = HEADER + textwrap.dedent('''
    model = Net()
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(1)
    for step in range(STEPS):
        x = torch.randn(16, 8, generator=g); y = torch.randint(0, 4, (16,), generator=g)
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
        bad = (~torch.isfinite(opt.state[model.head.weight]["exp_avg"])).flatten()
        print("BAD", step, bad.nonzero().flatten().tolist(), flush=True)
''')


def test_optimizer_fault_writes_the_state_after_the_step(tmp_path):
    from nanchaos import rng

    spec = {"kind": "tensor", "step": 2,
            "params": {"target": "optimizer:head.weight.exp_avg", "value": "nan", "count": 3}}
    job = run_ranks(tmp_path, ADAM_LOOP, plan(steps=4, faults=[spec]), world=1,
                    env={"STEPS": "4"})
    assert job.codes == [0], job.outputs
    (inject,) = job.of(0, "inject")
    assert inject["step"] == 2 and inject["target"] == "optimizer:head.weight.exp_avg"
    bad = [line.split(" ", 2) for line in job.outputs[0].splitlines() if line.startswith("BAD ")]
    # clean after steps 0 and 1; right after step 2's update exactly the picked elements of
    # head.weight's exp_avg (4 x 16) are NaN (step 3's update then spreads them)
    assert [b[2] for b in bad[:3]] == ["[]", "[]", str(sorted(rng.pick_elements(0, 0, 2, 64, 3)))]


@pytest.mark.parametrize("spec,reason", [
    ({"kind": "comm", "params": {"value": "nan", "target": "reduce_scatter"}},
     "comm target = \"reduce_scatter\" hits FSDP2's reduce-scatter, and this job's model is not "
     "sharded with fully_shard (it has a DistributedDataParallel model: remove target to hit its "
     "gradient all-reduce)"),
    ({"kind": "hang", "params": {"duration_ms": 10, "where": "before_reduce_scatter"}},
     "hang where = \"before_reduce_scatter\" stalls before FSDP2's reduce-scatter, and this "
     "job's model is not sharded with fully_shard (it has a DistributedDataParallel model; use "
     "where = \"before_grad_allreduce\" or \"step_start\")"),
])
def test_fsdp2_collective_points_on_a_ddp_job_are_refused_at_attach(tmp_path, spec, reason):
    job = run_ranks(tmp_path, DDP_LOOP, plan(faults=[dict(spec, step=1)]))
    assert job.codes == [1, 1], job.outputs
    for r in range(2):
        assert job.of(r, "attach_error")[0]["reason"] == f"[[fault]] #1 ({spec['kind']}): {reason}"
    assert job.of(0, "step_begin") == []


def test_an_interpreter_without_torch_is_named(tmp_path):
    other = None
    for cand in (shutil.which("python3"), "/usr/local/bin/python3"):
        if cand and os.path.realpath(cand) != os.path.realpath(sys.executable):
            probe = subprocess.run([cand, "-c", "import torch"], capture_output=True)
            if probe.returncode != 0:
                other = cand
                break
    if other is None:
        pytest.skip("no Python interpreter without torch on this host")
    events = tmp_path / "rank-0.jsonl"
    env = dict(os.environ, NANCHAOS_EVENTS=str(events), NANCHAOS_PLAN='{"steps": 1}',
               PYTHONPATH=AGENT_DIR, RANK="0", WORLD_SIZE="1")
    env.pop("NANCHAOS_AGENT_PID", None)
    r = subprocess.run([other, "-c", "print('job ran')"], env=env, capture_output=True, text=True)
    assert r.returncode == 2 and "job ran" not in r.stdout
    text = events.read_text()
    assert '"ev":"agent"' in text and "cannot import torch" in text and "/usr/bin/python3" in text


def test_an_existing_sitecustomize_still_runs_and_child_interpreters_stay_silent(tmp_path):
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "sitecustomize.py").write_text(
        "import os\nopen(os.path.join(os.environ['MARK_DIR'], f'mark-{os.getpid()}'), 'w').close()\n")
    script = SOLO_LOOP + textwrap.dedent('''
        import subprocess
        subprocess.run([sys.executable, "-c", "import torch; print('child ok')"], check=True)
    ''')
    job = run_ranks(tmp_path, script, plan(), world=1,
                    env={"PYTHONPATH": AGENT_DIR + os.pathsep + str(theirs),
                         "MARK_DIR": str(tmp_path)})
    assert job.codes == [0], job.outputs
    assert "child ok" in job.outputs[0]
    marks = [p for p in os.listdir(tmp_path) if p.startswith("mark-")]
    assert len(marks) == 2  # the job's interpreter and its child both ran their own sitecustomize
    # Only the rank's own process wrote evidence: one agent line, one start, one exit.
    assert len(job.of(0, "agent")) == 1 and len(job.of(0, "start")) == 1
    assert len(job.of(0, "exit")) == 1
    # The bootstrap timed its own `import torch` (a restart's import_ms), once.
    (imported,) = job.of(0, "imported")
    assert imported["module"] == "torch" and imported["import_ms"] > 0


def test_lr_schedulers_wrap_the_agents_step_and_the_lr_fault_rides_on_their_lr(tmp_path):
    script = HEADER + textwrap.dedent('''
        model = Net()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda it: 1.0 / (it + 1))
        for it in range(4):
            model(torch.randn(4, 8)).sum().backward()
            opt.step(); opt.zero_grad(); sched.step()
        print("last-lr", sched.get_last_lr()[0])
    ''')
    p = plan(steps=4, faults=[{"kind": "lr", "step": 1, "params": {"factor": 100.0}}])
    job = run_ranks(tmp_path, script, p, world=1)
    assert job.codes == [0], job.outputs
    assert [round(e["lr"], 6) for e in job.of(0, "step_end")] == [0.1, 5.0, 0.033333, 0.025]
    assert "last-lr 0.02" in job.outputs[0]  # the scheduler's own state is untouched


def test_a_parameter_target_that_names_nothing_is_refused_at_attach_with_the_nearest_name(tmp_path):
    p = plan(faults=[{"kind": "tensor", "step": 3,
                      "params": {"target": "gradient:module.head.weight", "value": "nan"}}])
    job = run_ranks(tmp_path, SOLO_LOOP, p, world=1)
    assert job.codes == [1]
    reason = job.of(0, "attach_error")[0]["reason"]
    assert "matches no parameter of Net" in reason
    assert "without the wrapper's `module.`" in reason and "gradient:head.weight" in reason
    assert job.of(0, "step_end") == []


def test_a_gradscaler_backoff_is_observed_with_the_skip(tmp_path):
    import torch

    if not hasattr(torch, "amp") or not hasattr(torch.amp, "GradScaler"):
        pytest.skip(f"torch {torch.__version__} has no CPU GradScaler (torch.amp.GradScaler, >= 2.3)")
    script = HEADER + textwrap.dedent('''
        model = Net()
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        scaler = torch.amp.GradScaler("cpu")
        for it in range(5):
            loss = F.cross_entropy(model(torch.randn(8, 8)), torch.randint(0, 4, (8,)))
            scaler.scale(loss).backward()
            scaler.step(opt); scaler.update(); opt.zero_grad()
    ''')
    p = plan(steps=5, faults=[{"kind": "tensor", "step": 2,
                               "params": {"target": "gradient:head.weight", "value": "inf"}}])
    job = run_ranks(tmp_path, script, p, world=1)
    assert job.codes == [0], job.outputs
    assert job.of(0, "start")[0]["scaler"] == "GradScaler"
    assert steps_of(job, 0)[2] == (2, "skip")
    dets = [(d["detector"], d["step"]) for d in job.of(0, "detect")]
    assert dets == [("observed:skip", 2), ("observed:scale_backoff", 2)]
    assert job.of(0, "final")[0]["loss_scale"] == 32768.0
