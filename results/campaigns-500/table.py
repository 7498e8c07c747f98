#!/usr/bin/env python3
"""The tables of docs/campaign-findings.md from the campaign summaries in this folder.

Usage: results/campaigns-500/table.py [FOLDER]   (prints Markdown; FOLDER defaults to this one)

Each <campaign>-s<seed>.json is the `summary` of one `nanchaos campaign ... --faults 500
--seed <seed>` run (campaign.json with its per-fault rows left out). Seed 1 is the seed the
attribution rules were tuned on; seed 2 was held out. The first table is the stack's own score
(what the stack under test named); the second is what the harness's post-mortem explained of
the faults the stack did not name, reported beside it and never inside it.
"""
import json
import pathlib
import sys

HERE = pathlib.Path(__file__).resolve().parent
ORDER = ["mlp-default", "mlp-full", "transformer-default", "transformer-full"]
OUTCOMES = ["masked", "detected_recovered", "detected_unrecovered", "silent_corruption", "hang",
            "crash"]


def pct(c):
    return "-" if not c or c["n"] == 0 else f"{100 * c['rate']:.1f}% ({c['k']}/{c['n']})"


def ci(c):
    lo, hi = c["ci95"]
    return f"{100 * c['rate']:.1f}% [{100 * lo:.1f}-{100 * hi:.1f}] ({c['k']}/{c['n']})"


def main():
    folder = pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else HERE
    runs = []
    for name in ORDER:
        for seed in (1, 2):
            f = folder / f"{name}-s{seed}.json"
            if f.exists():
                runs.append((name, seed, json.loads(f.read_text())))
    print("| Campaign | Seed | Coverage (95% CI) | Rank | Layer | Cause | "
          "masked / det_rec / det_unrec / silent / hang / crash | Late | Wall |")
    print("|---|---|---|--:|--:|--:|---|--:|--:|")
    for name, seed, d in runs:
        s = d["summary"]
        a = s["attribution_counts"]
        o = " / ".join(str(s["outcomes"][k]) for k in OUTCOMES)
        role = "1 (tuning)" if seed == 1 else f"{seed} (held out)"
        print(f"| {name} | {role} | {ci(s['coverage_counts'])} | {pct(a['rank'])} | "
              f"{pct(a['layer'])} | {pct(a['cause'])} | {o} | {s.get('late_detections', 0)} | "
              f"{d['wall_s']:.0f} s |")
    print()
    print("| Campaign | Seed | Not named by the stack | Explained by the harness | "
          "its rank right | its cause right |")
    print("|---|---|--:|--:|--:|--:|")
    for name, seed, d in runs:
        h = d["summary"]["harness"]
        print(f"| {name} | {seed} | {h['explained']['n']} | {pct(h['explained'])} | "
              f"{pct(h['rank'])} | {pct(h['cause'])} |")


if __name__ == "__main__":
    main()
