"""The fault target parser (nanchaos/target.py) against the shared test vector
(tests/data/target_vectors.json), which tests/harness/target_test.cpp checks for the C++ twin
(harness/scenario/target.h): both agents read a target the same way."""

import json
import os

import pytest

from nanchaos.faults.base import fault_target
from nanchaos.plan import FaultSpec
from nanchaos.target import WHERES, parse_target

VECTORS = os.path.join(os.path.dirname(__file__), "..", "..", "..", "tests", "data",
                       "target_vectors.json")

with open(VECTORS, encoding="utf-8") as _fh:
    CASES = json.load(_fh)["cases"]


@pytest.mark.parametrize("case", CASES, ids=[repr(c["text"]) for c in CASES])
def test_parse_target_matches_the_shared_vector(case):
    allowed = case.get("allowed", WHERES)
    if "error" in case:
        with pytest.raises(ValueError) as err:
            parse_target(case["text"], allowed)
        assert str(err.value) == case["error"]
        return
    t = parse_target(case["text"], allowed)
    want = case["target"]
    assert (t.where, t.pattern, t.name, t.state, t.text) == \
        (want["where"], want["pattern"], want["name"], want["state"], want["text"])


def test_the_vector_covers_every_where_and_refusals():
    wheres = {c["target"]["where"] for c in CASES if "target" in c}
    assert wheres == set(WHERES)
    assert sum("error" in c for c in CASES) >= 5


def test_a_fault_whose_target_does_not_parse_has_none():
    spec = FaultSpec(index=0, kind="tensor", ranks="all", step=0, repeat=1, probability=1.0,
                     persistent=False, params={"target": "activation:"})
    assert fault_target(spec) is None
