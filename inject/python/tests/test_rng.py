"""The portable generator against the shared test vector (tests/data/generator_vectors.json),
which tests/inject/rng_test.cpp checks for the C++ twin: same scenario, same elements."""

import json
import os

import pytest

from nanchaos import rng

VECTORS = os.path.join(os.path.dirname(__file__), "..", "..", "..", "tests", "data",
                       "generator_vectors.json")


@pytest.fixture(scope="module")
def vec():
    with open(VECTORS, encoding="utf-8") as fh:
        return json.load(fh)


def test_mix_and_stream(vec):
    for m in vec["mix"]:
        assert rng.mix(int(m["h"]), int(m["v"])) == int(m["out"])
    for s in vec["stream"]:
        g = rng.SplitMix64(int(s["key"]))
        assert [g.next() for _ in s["next"]] == [int(x) for x in s["next"]]


def test_below_and_fires(vec):
    for b in vec["below"]:
        g = rng.SplitMix64(int(b["key"]))
        assert [g.below(int(b["n"])) for _ in b["out"]] == [int(x) for x in b["out"]]
    for f in vec["fires"]:
        assert rng.fires(f["seed"], f["fault"], f["step"], f["rank"], f["probability"]) == f["fires"]


def test_pick_elements(vec):
    for p in vec["pick"]:
        got = rng.pick_elements(p["seed"], p["fault"], p["step"], p["numel"], p["want"])
        assert got == p["out"]
        assert len(set(got)) == len(got) == min(p["want"], p["numel"])
        assert all(0 <= i < p["numel"] for i in got)


def test_probability_draws_are_roughly_fair():
    hits = sum(rng.fires(3, 0, step, 1, 0.3) for step in range(4000))
    assert 1000 < hits < 1400


def test_element_count():
    assert rng.element_count(100, 5, None) == 5
    assert rng.element_count(100, 1, 0.25) == 25
    assert rng.element_count(3, 1, 0.01) == 1
    assert rng.element_count(4, 9, None) == 4
