"""Fast unit tests of the agent's pure modules: the plan (plan.py), target names and matching
(attach_rules.py, faults/base.py). No process group, no job: each test runs in milliseconds, on
torch 1.13 and 2.x alike."""

from __future__ import annotations

import json
import os
import math
import types

import pytest
import torch

from nanchaos.attach_rules import ambiguity, strip_name, unmatched_activation, unmatched_target
from nanchaos.faults.base import fault_target, match_target
from nanchaos.plan import FaultSpec, Plan, PlanError, fmt_value, special_float
from nanchaos.target import Target, parse_target

from ranks import AGENT_DIR


def plan_json(**over) -> str:
    d = {"scenario": "s", "seed": 7, "steps": 10, "world": 2,
         "faults": [{"index": 0, "kind": "tensor", "ranks": [1], "step": 3,
                     "params": {"target": "activation:layers.1"}}]}
    d.update(over)
    return json.dumps(d)


def test_plan_from_json_types_the_common_keys_and_keeps_kind_keys_in_params():
    p = Plan.from_json(plan_json())
    assert (p.scenario, p.seed, p.steps, p.world, p.micro_batches) == ("s", 7, 10, 2, 1)
    f = p.faults[0]
    assert (f.index, f.kind, f.ranks, f.step, f.repeat, f.probability, f.persistent) == \
        (0, "tensor", [1], 3, 1, 1.0, False)
    assert f.param("target") == "activation:layers.1"
    assert f.param("absent", "dflt") == "dflt"
    assert fault_target(f) == Target("activation", "layers.1")


def test_plan_ranks_all_and_a_scalar_rank():
    faults = [{"index": 0, "kind": "crash", "ranks": "all", "step": 1},
              {"index": 1, "kind": "crash", "ranks": 3, "step": 1}]
    p = Plan.from_json(plan_json(faults=faults))
    assert p.faults[0].ranks == "all" and p.faults[0].hits_rank(5)
    assert p.faults[1].ranks == [3] and p.faults[1].hits_rank(3) and not p.faults[1].hits_rank(0)


@pytest.mark.parametrize("text, message", [
    ("{not json", "plan is not JSON"),
    ("[1, 2]", "plan must be a JSON object"),
    (json.dumps({"seed": 1}), "plan field missing or malformed"),  # no "steps"
    (json.dumps({"steps": 4, "faults": [{"kind": "tensor", "step": 1}]}),
     "plan field missing or malformed"),  # a fault without its index
    (json.dumps({"steps": 4, "micro_batches": 0}), "micro_batches must be >= 1"),
])
def test_plan_errors_say_what_is_wrong(text, message):
    with pytest.raises(PlanError, match=message):
        Plan.from_json(text)


def test_plan_load_names_the_missing_file(tmp_path):
    missing = tmp_path / "nope.json"
    with pytest.raises(PlanError, match=str(missing)):
        Plan.load({"NANCHAOS_PLAN_FILE": str(missing)})
    with pytest.raises(PlanError, match="neither NANCHAOS_PLAN nor NANCHAOS_PLAN_FILE"):
        Plan.load({})
    good = tmp_path / "plan.json"
    good.write_text(plan_json(steps=5))
    assert Plan.load({"NANCHAOS_PLAN_FILE": str(good)}).steps == 5
    # NANCHAOS_PLAN (the text itself) wins over the file.
    assert Plan.load({"NANCHAOS_PLAN": plan_json(steps=6), "NANCHAOS_PLAN_FILE": str(good)}).steps == 6


def test_special_float_and_fmt_value_round_trip_the_special_values():
    assert math.isnan(special_float("nan")) and special_float(" -INF ") == -math.inf
    assert special_float(3) == 3.0 and special_float("+inf") == math.inf
    for bad in ("1e3", True, None, [1]):
        with pytest.raises(PlanError):
            special_float(bad)
    assert [fmt_value(v) for v in (math.nan, math.inf, -math.inf)] == ["nan", "inf", "-inf"]


def test_fault_window_and_probability_draw():
    f = FaultSpec(index=2, kind="tensor", ranks="all", step=4, repeat=3, probability=1.0,
                  persistent=False, params={})
    assert [s for s in range(10) if f.in_window(s)] == [4, 5, 6]
    assert f.armed(seed=1, step=5, rank=0) and not f.armed(seed=1, step=7, rank=0)
    never = FaultSpec(index=2, kind="tensor", ranks="all", step=0, repeat=-1, probability=0.0,
                      persistent=False, params={})
    assert not any(never.armed(seed=1, step=s, rank=0) for s in range(50))
    half = FaultSpec(index=2, kind="tensor", ranks="all", step=0, repeat=-1, probability=0.5,
                     persistent=False, params={})
    draws = [half.armed(seed=9, step=s, rank=1) for s in range(400)]
    assert draws == [half.armed(seed=9, step=s, rank=1) for s in range(400)]  # seeded
    assert 120 < sum(draws) < 280


def test_match_target_star_stays_within_one_segment():
    assert match_target("layers.*.weight", "layers.3.weight")
    assert not match_target("layers.*.weight", "layers.3.attn.weight")
    assert match_target("*", "head") and not match_target("*", "head.bias")
    assert not match_target("layers.1", "layers.10")


def fault(target: str):
    t = parse_target(target)
    return types.SimpleNamespace(where=t.where, pattern=t.pattern, target=t)


NAMES = ["layers.0.weight", "layers.0.bias", "layers.1.weight", "head.weight"]


def test_unmatched_target_suggests_the_nearest_names():
    assert unmatched_target(fault("parameter:layers.1.weight"), NAMES, "Net") is None
    assert unmatched_target(fault("gradient:layers.*.bias"), NAMES, "Net") is None
    why = unmatched_target(fault("parameter:layers.1.wieght"), NAMES, "Net")
    assert "matches no parameter of Net" in why and "parameter:layers.1.weight" in why
    why = unmatched_target(fault("parameter:module.head.weight"), NAMES, "Net")
    assert "without the wrapper's `module.`" in why and "parameter:head.weight" in why


def test_unmatched_target_optimizer_state_and_other_wheres():
    assert unmatched_target(fault("optimizer:head.weight.exp_avg"), NAMES, "Net") is None
    why = unmatched_target(fault("optimizer:hed.weight.exp_avg"), NAMES, "Net")
    assert "optimizer:head.weight.exp_avg" in why and "write optimizer:PARAM.STATE" in why
    assert unmatched_target(fault("loss"), NAMES, "Net") is None
    # An activation: target is checked later (probes appear in the forward), unless it names a
    # wrapper component.
    assert unmatched_target(fault("activation:whatever"), NAMES, "Net") is None
    assert "_orig_mod" in unmatched_target(fault("activation:_orig_mod.layers.0"), NAMES, "Net")


def test_unmatched_activation_counts_probes_as_names():
    modules = ["layers", "layers.0", "head"]
    assert unmatched_activation(fault("activation:layers.0"), modules, [], "Net") is None
    assert unmatched_activation(fault("activation:attn_scores"), modules, ["attn_scores"],
                                "Net") is None
    why = unmatched_activation(fault("activation:haed"), modules, ["attn_scores"], "Net")
    assert "activation:head" in why


def test_strip_name_and_ambiguity():
    assert strip_name("module._orig_mod.layers.0.weight") == "layers.0.weight"
    assert ambiguity([torch.nn.Linear(1, 1)]) is None
    why = ambiguity([torch.nn.Linear(1, 1), torch.nn.ReLU()])
    assert "2 candidates (Linear, ReLU)" in why and "nanchaos.attach(model, optimizer)" in why


def test_log_levels_follow_nanchaos_log():
    import logging
    import subprocess
    import sys

    from nanchaos.log import level_of

    assert level_of(None) == level_of("") == logging.WARNING
    assert level_of("INFO") == logging.INFO and level_of(" trace ") == 5
    assert level_of("loud") is None
    code = ("from nanchaos.log import logger; lg = logger(3); "
            "lg.info('attached'); lg.debug('per step'); lg.warning('odd')")
    env = dict(os.environ, PYTHONPATH=AGENT_DIR)

    def stderr_with(level):
        env["NANCHAOS_LOG"] = level
        return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                              text=True, check=True).stderr.splitlines()

    assert stderr_with("info") == ["nanchaos rank 3: INFO: attached",
                                   "nanchaos rank 3: WARNING: odd"]
    assert stderr_with("off") == []
    assert stderr_with("loud") == [
        "nanchaos rank 3: WARNING: NANCHAOS_LOG=loud: unknown level (one of: trace, debug, "
        "info, warn, error, off); using warn", "nanchaos rank 3: WARNING: odd"]
