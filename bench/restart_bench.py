#!/usr/bin/env python3
"""Restart cost of the built-in mlp (against the restart contract's resume goal): one crash, one relaunch, the resume latency split.

One invocation is one repetition: it runs a restart scenario (default: the shipped
``scenarios/restart-crash-resume-from-checkpoint.toml``, 2 ranks, rank 1 crashes at step 7, one
relaunch resumes from the checkpoint of step 6) with ``nanchaos run`` into a scratch folder, reads
report.json's ``restarts[]`` (docs/scenario-format.md, "Recovery by restart") and prints one JSON
object on stdout:

* ``resume_ms``: the failing event (the crash fault's injection) to every rank of the next launch
  having completed its first step; the goal is <= 2000 ms on 2 CPU ranks.
* its consecutive phases, which add up to it: ``detect_ms`` (-> the first rank of the failed
  launch gone), ``teardown_ms`` (-> every process of it gone), ``relaunch_ms`` (-> every rank of
  the next launch up, ``restart_delay_ms`` included: 0 here), ``load_ms`` (-> every rank loaded
  its checkpoint), ``first_step_ms`` (-> every rank completed its first step).
* ``import_ms`` (external jobs: the part of load_ms or first_step_ms the next launch spent in
  ``import torch``, the longest rank's; null for the built-in job, which imports nothing).
* ``steps_lost``, ``restarts`` (per repetition: 1 for the default scenario, more for a scenario
  with more), and the ratios ``ratio_resume_to_goal`` (resume_ms / 2000 ms) and
  ``ratio_relaunch_share`` (relaunch_ms / resume_ms: the share a warm launcher could save).

A built-in job imports nothing: its process start (mpirun's spawn and LibTorch's static
initialisers, ~0.5 s a process on the 2-core host) is part of ``relaunch_ms``. With more than one
restart in a repetition each phase is the median over them.

The scenario's ``final_matches_clean`` is dropped (it makes the harness run a clean copy of the
job first, which is not part of a restart); the expectations left must hold, else exit 1.

    bench/run.py measure --build build --programs "" \\
        --extra "restart=python3 bench/restart_bench.py build/nanchaos" --reps 7
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent
PHASES = ("resume_ms", "detect_ms", "teardown_ms", "relaunch_ms", "load_ms", "first_step_ms",
          "import_ms")
GOAL_MS = 2000.0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("nanchaos", help="the nanchaos binary (build/nanchaos)")
    ap.add_argument("--scenario", type=Path,
                    default=SRC / "scenarios/restart-crash-resume-from-checkpoint.toml")
    ap.add_argument("--keep", type=Path, help="run into this folder and keep it (default: a "
                    "temporary folder, removed)")
    a = ap.parse_args()
    try:
        text = a.scenario.read_text()
    except OSError as e:
        sys.exit(f"restart_bench.py: {a.scenario}: {e.strerror}")
    stripped = re.sub(r"(?m)^final_matches_clean\s*=.*\n", "", text)
    with tempfile.TemporaryDirectory(prefix="nanchaos-restart-bench-") as tmp:
        work = a.keep or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        scenario = a.scenario  # as is where nothing is dropped: its relative paths stay right
        if stripped != text:
            if "[job]" in text and "command" in text:
                sys.exit(f"restart_bench.py: {a.scenario}: an external job with final_matches_clean "
                         "(its copy would lose the relative paths); give a scenario without it")
            scenario = work / a.scenario.name
            scenario.write_text(stripped)
        run = subprocess.run([a.nanchaos, "run", str(scenario), "--quiet", "--out",
                              str(work / "run")], check=False, capture_output=True,
                             text=True)
        try:
            report = json.loads((work / "run" / "report.json").read_text())
        except (OSError, json.JSONDecodeError) as e:
            sys.exit(f"restart_bench.py: no report.json ({e}); nanchaos said:\n{run.stderr[-2000:]}")
    (entry,) = report["scenarios"]
    restarts = entry.get("restarts") or []
    if not restarts:
        sys.exit(f"restart_bench.py: {a.scenario.name}: verdict {entry.get('verdict')}, no restart "
                 f"in report.json ({entry.get('reason', '')})")
    out: dict = {"scenario": a.scenario.name, "verdict": entry.get("verdict"),
                 "restarts": len(restarts)}
    for k in PHASES:
        vals = [r[k] for r in restarts if r.get(k) is not None]
        out[k] = round(statistics.median(vals), 1) if vals else None
    out["steps_lost"] = sum(int(r.get("steps_lost") or 0) for r in restarts)
    if out["resume_ms"]:
        out["ratio_resume_to_goal"] = round(out["resume_ms"] / GOAL_MS, 3)
        out["ratio_relaunch_share"] = round((out["relaunch_ms"] or 0.0) / out["resume_ms"], 3)
        # The contract's goal excludes the job's own imports: this is the figure to hold against it
        # for an external job (the same as resume_ms for a built-in one).
        out["resume_less_import_ms"] = round(out["resume_ms"] - (out["import_ms"] or 0.0), 1)
    print(" ".join(f"{k}={out[k]}" for k in PHASES), file=sys.stderr)
    print(json.dumps(out))
    return 0 if entry.get("verdict") == "pass" else 1


if __name__ == "__main__":
    sys.exit(main())
