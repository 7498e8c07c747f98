#!/usr/bin/env python3
"""A stand-in benchmark program for tests/bench/run_test.py: prints Google Benchmark's JSON with
one row whose counters are known functions of NANCHAOS_BENCH_REP (ratio_vs_base = 1 + rep / 10,
step_ms = 100 + rep), plus an aggregate row that bench/run.py must skip. FAKE_BENCH_FAIL_REP=k
makes repetition k exit 3."""
import json
import os
import sys

rep = int(os.environ["NANCHAOS_BENCH_REP"])
if os.environ.get("FAKE_BENCH_FAIL_REP") == str(rep):
    sys.exit(3)
print(json.dumps({"context": {"host_name": "fake"}, "benchmarks": [
    {"name": "BM_Fake/ranks:2", "run_type": "iteration", "iterations": 1,
     "ratio_vs_base": 1 + rep / 10, "step_ms": 100 + rep, "unrelated": 7},
    {"name": "BM_Fake/ranks:2_mean", "run_type": "aggregate", "ratio_vs_base": 99},
]}))
