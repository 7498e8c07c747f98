#!/usr/bin/env python3
"""Clean-run campaign for the ``straggler`` detector's false positives (it must raise none on clean runs).

Runs the shipped clean controls many times (``nanchaos run --trials N``, trial i with seed + i)
across workloads and world sizes, and counts every detection the stack raised on them: a clean
run has no fault, so each detection is a false positive. The ``straggler`` detector's count is
the figure of interest (it reads wall-clock phase times, so scheduling noise is what can fool
it: 4 and 64 ranks on 2 cores are the hard cases); every other detector's is reported beside it.

Configurations (name, scenario, trials), 100 runs by default:
  mlp-4       scenarios/clean-mlp-4ranks.toml            35
  tf-2        scenarios/clean-transformer-2ranks.toml    30
  tf-4-120    scenarios/clean-straggler-4ranks.toml      25  (120 steps)
  mlp-64      scale-64ranks-nan-rank37 without its fault 10  (64 ranks, 6 steps)

Usage: bench/clean_runs.py NANCHAOS_BIN OUT_DIR [--scale K] [--reuse] (K multiplies the trials;
--reuse counts the runs an earlier invocation left in OUT_DIR).
Writes OUT_DIR/clean-runs.json: per configuration the runs, their verdicts, the runs with any
detection and the detection events by detector (every rank's, every trial's); exit status 1 when any straggler detection was seen, 2 on a run error.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent


def clean_64(out: Path) -> Path:
    """The 64-rank scale scenario with its fault and expectations removed: a clean control."""
    text = (SRC / "scenarios/scale-64ranks-nan-rank37.toml").read_text()
    text = text.split("[[fault]]")[0]
    text = text.replace('name = "scale-64ranks-nan-rank37"', 'name = "clean-mlp-64ranks"')
    text = re.sub(r'description = ".*"', 'description = "64 ranks, tiny MLP, no fault."', text)
    text += '\n[expect]\ndetected = false\ndeadlock = false\nrecovered = true\n'
    path = out / "clean-mlp-64ranks.toml"
    path.write_text(text)
    return path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("nanchaos")
    ap.add_argument("out", type=Path)
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--reuse", action="store_true",
                    help="count the runs already in OUT_DIR (a configuration without one runs)")
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    configs = [
        ("mlp-4", SRC / "scenarios/clean-mlp-4ranks.toml", 35),
        ("tf-2", SRC / "scenarios/clean-transformer-2ranks.toml", 30),
        ("tf-4-120", SRC / "scenarios/clean-straggler-4ranks.toml", 25),
        ("mlp-64", clean_64(a.out), 10),
    ]
    # The fields bench/run.py's `check` wants of every result file (schema, host, git).
    spec = importlib.util.spec_from_file_location("bench_run", SRC / "bench/run.py")
    assert spec and spec.loader
    bench_run = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench_run)
    result: dict = {"schema": bench_run.SCHEMA,
                    "host": bench_run.host_facts(Path(a.nanchaos).resolve().parent, sys.executable),
                    "git": bench_run.git_facts(), "host_cores": os.cpu_count(),
                    "load_at_start": os.getloadavg()[0], "configs": {}}
    straggler_total = 0
    errors = 0
    for name, scenario, trials in configs:
        n = max(1, round(trials * a.scale))
        t0 = time.monotonic()
        run_dir = a.out / name
        rc = None
        if not (a.reuse and (run_dir / "report.json").exists()):
            rc = subprocess.run([a.nanchaos, "run", str(scenario), "--trials", str(n), "--quiet",
                                 "--out", str(run_dir)], capture_output=True, text=True).returncode
        report = json.loads((run_dir / "report.json").read_text())
        (entry,) = report["scenarios"]  # one scenario; its trials are summarised in `stats`
        stats = entry.get("stats") or {"trials": 1, "verdicts": {entry["verdict"]: 1}}
        runs = int(stats["trials"])
        # Every detection any rank logged in any trial (the judge's stats keep the first only).
        by_detector: dict = {}
        flagged = 0
        for events in sorted(run_dir.glob("*/trial-*/events")) or sorted(run_dir.glob("*/events")):
            seen = False
            for log in events.glob("rank-*.jsonl"):
                for line in log.read_text().splitlines():
                    if '"ev":"detect"' not in line:
                        continue
                    det = json.loads(line).get("detector", "?")
                    by_detector[det] = by_detector.get(det, 0) + 1
                    seen = True
            flagged += 1 if seen else 0
        errs = sum(v for k, v in stats.get("verdicts", {}).items() if k not in ("pass", "fail"))
        errors += errs
        straggler_total += by_detector.get("straggler", 0)
        result["configs"][name] = {
            "scenario": str(scenario.relative_to(SRC)) if scenario.is_relative_to(SRC) else scenario.name,
            "runs": runs, "verdicts": stats.get("verdicts"), "runs_with_a_detection": flagged,
            "detection_events": by_detector, "errors": errs, "exit": rc, "wall_s": round(time.monotonic() - t0, 1),
        }
        print(f"{name}: {runs} runs, {flagged} with a detection {by_detector}, "
              f"{errs} errors, {time.monotonic() - t0:.0f} s", flush=True)
    result["load_at_end"] = os.getloadavg()[0]
    result["runs"] = sum(c["runs"] for c in result["configs"].values())
    result["straggler_false_positives"] = straggler_total
    (a.out / "clean-runs.json").write_text(json.dumps(result, indent=2) + "\n")
    print(f"clean runs: {result['runs']}, straggler false positives: {straggler_total}")
    return 2 if errors else 1 if straggler_total else 0


if __name__ == "__main__":
    sys.exit(main())
