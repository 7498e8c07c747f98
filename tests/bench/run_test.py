#!/usr/bin/env python3
"""bench/run.py end to end on a stand-in benchmark (tests/bench/fake_benchmark.py): the
repetitions are interleaved and rotated, the medians and spreads are those of the known counters,
a failed repetition is kept and fails `check`, and too few repetitions fail `check`.
Run: python3 tests/bench/run_test.py (CTest: bench_run_driver)."""
import json
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RUN = [sys.executable, str(ROOT / "bench" / "run.py")]
FAKE = f"{sys.executable} {ROOT / 'tests' / 'bench' / 'fake_benchmark.py'}"


def measure(out: Path, reps: int, env=None, extra=("a", "b")):
    cmd = RUN + ["measure", "--programs", "", "--reps", str(reps), "--out", str(out),
                 "--build", str(out.parent)]
    for name in extra:
        cmd += ["--extra", f"{name}={FAKE}"]
    return subprocess.run(cmd, capture_output=True, text=True, env=env)


class BenchRun(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = Path(self.tmp.name)

    def tearDown(self):
        self.tmp.cleanup()

    def test_medians_spread_and_rotation(self):
        out = self.dir / "r.json"
        p = measure(out, 5)
        self.assertEqual(p.returncode, 0, p.stderr)
        result = json.loads(out.read_text())
        runs = result["runs"]
        self.assertEqual(len(runs), 10)
        # Repetition r starts with program r mod 2.
        firsts = [x["program"] for x in runs if x["position"] == 0]
        self.assertEqual(firsts, ["a", "b", "a", "b", "a"])
        for x in runs:
            self.assertIn("load_before", x)
            self.assertGreater(x["wall_s"], 0)
        self.assertTrue(result["host"]["cpu_model"])
        self.assertTrue(result["git"]["commit"])
        s = json.loads(subprocess.run(RUN + ["summarize", str(out), "--json"],
                                      capture_output=True, text=True, check=True).stdout)
        ratio = [x for x in s if x["program"] == "a" and x["counter"] == "ratio_vs_base"]
        self.assertEqual(len(ratio), 1, s)  # the aggregate row is skipped
        r = ratio[0]
        self.assertEqual(r["row"], "BM_Fake/ranks:2")
        self.assertAlmostEqual(r["median"], 1.2)
        self.assertAlmostEqual(r["min"], 1.0)
        self.assertAlmostEqual(r["max"], 1.4)
        self.assertAlmostEqual(r["q1"], 1.1)
        self.assertAlmostEqual(r["q3"], 1.3)
        self.assertEqual(r["n"], 5)
        step = [x for x in s if x["program"] == "b" and x["counter"] == "step_ms"][0]
        self.assertAlmostEqual(step["median"], 102)
        self.assertFalse([x for x in s if x["counter"] == "unrelated"])
        md = subprocess.run(RUN + ["summarize", str(out), "--markdown"], capture_output=True,
                            text=True, check=True).stdout
        self.assertIn("| a | `BM_Fake/ranks:2` | `ratio_vs_base` | 1.200 | 1.000-1.400 |", md)
        c = subprocess.run(RUN + ["check", str(out)], capture_output=True, text=True)
        self.assertEqual(c.returncode, 0, c.stderr)

    def test_failed_repetition_is_kept_and_fails_check(self):
        import os
        out = self.dir / "f.json"
        p = measure(out, 5, env=dict(os.environ, FAKE_BENCH_FAIL_REP="2"))
        self.assertEqual(p.returncode, 1)
        runs = json.loads(out.read_text())["runs"]
        self.assertEqual(len(runs), 10)  # the runs after the failure still ran
        self.assertEqual(sorted(x["rc"] for x in runs if x["rep"] == 2), [3, 3])
        c = subprocess.run(RUN + ["check", str(out)], capture_output=True, text=True)
        self.assertEqual(c.returncode, 1)
        self.assertIn("a rep 2: rc 3", c.stderr)
        # The summary uses the 4 good repetitions only.
        s = json.loads(subprocess.run(RUN + ["summarize", str(out), "--json"],
                                      capture_output=True, text=True, check=True).stdout)
        self.assertEqual(s[0]["n"], 4)

    def test_too_few_repetitions_fail_check(self):
        out = self.dir / "few.json"
        self.assertEqual(measure(out, 3, extra=("a",)).returncode, 0)
        c = subprocess.run(RUN + ["check", str(out)], capture_output=True, text=True)
        self.assertEqual(c.returncode, 1)
        self.assertIn("a: 3 repetitions, want >= 5", c.stderr)

    def test_readme_tables_of_figures_must_cite_a_complete_result(self):
        results = self.dir / "results"
        results.mkdir()
        good = results / "zz-run-test-good.json"
        few = results / "zz-run-test-few.json"
        self.assertEqual(measure(good, 5, extra=("a",)).returncode, 0)
        self.assertEqual(measure(few, 2, extra=("a",)).returncode, 0)
        readme = self.dir / "README.md"
        readme.write_text(
            "| Stack | What runs |\n|---|---|\n| `none` | nothing, 1/world |\n\n"
            "From bench/results/zz-run-test-good.json:\n\n"
            "| Row | Median |\n|---|--:|\n| a | 1.200 |\n\n"
            "Uncited:\n\n| Row | Median |\n|---|--:|\n| a | 0.98 |\n\n"
            "From bench/results/zz-run-test-few.json:\n\n| Row | Median |\n|---|--:|\n| a | 1.1 |\n\n"
            "From bench/results/missing.json:\n\n| Row | Median |\n|---|--:|\n| a | 1.1 |\n")
        r = subprocess.run(RUN + ["readme", str(readme), "--results-dir", str(results)], capture_output=True, text=True)
        self.assertEqual(r.returncode, 1)
        lines = r.stderr.strip().splitlines()
        self.assertEqual(len(lines), 3, r.stderr)  # not the definitions, not the cited table
        self.assertIn(":13: a table of figures cites no bench/results/*.json", lines[0])
        self.assertIn("zz-run-test-few.json: a: 2 repetitions, want >= 5", lines[1])
        self.assertIn("cites bench/results/missing.json, which does not exist", lines[2])

    def test_bad_arguments_are_named(self):
        p = subprocess.run(RUN + ["measure", "--programs", "", "--extra", "nocommand"],
                           capture_output=True, text=True)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("NAME=COMMAND", p.stderr)
        p = subprocess.run(RUN + ["measure", "--programs", "warp"], capture_output=True, text=True)
        self.assertIn("unknown program 'warp'", p.stderr)
        p = subprocess.run(RUN + ["check", str(self.dir / "missing.json")], capture_output=True,
                           text=True)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("missing.json", p.stderr)


if __name__ == "__main__":
    unittest.main()
