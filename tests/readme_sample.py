#!/usr/bin/env python3
"""The README's sample console output, generated from a real run of the shipped suite.

usage: readme_sample.py NANCHAOS RUN_DIR README.md [--write]

Renders RUN_DIR's console table with `NANCHAOS merge RUN_DIR --out TMP` (the same rows `run`
prints), keeps its header, the first ROWS scenarios that ran (suite order) and the footer, and
either writes that into README.md's block (between the `$ build/nanchaos run scenarios/` line
and the closing fence) with --write, or checks the block against it: the header, each row but
its two timing columns (LAT(ms), WALL(s): machine noise), and the footer's scenario count (the
passed/skipped split depends on the host: a GPU, the torch 2.x venv). Exit 0 when the README
holds, 1 with the difference and the command that regenerates it.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile

ROWS = 8
PROMPT = "$ build/nanchaos run scenarios/"
REPORTS = ("reports: results/runs/20261206T060000Z-scenarios/report.json, junit.xml, report.md, "
           "report.html")


def generated(nanchaos: str, run_dir: str) -> list[str]:
    with tempfile.TemporaryDirectory() as tmp:
        out = subprocess.run([nanchaos, "merge", run_dir, "--out", tmp + "/m"], text=True,
                             capture_output=True, check=False)
    lines = out.stdout.splitlines()
    if out.returncode not in (0, 1) or not lines or not lines[0].startswith("VERDICT"):
        sys.exit(f"readme_sample: `nanchaos merge {run_dir}` failed ({out.returncode}): "
                 f"{out.stderr.strip()}")
    rows = [ln for ln in lines[1:] if ln.startswith(("PASS", "FAIL", "ERROR"))][:ROWS]
    footer = next(ln for ln in lines if ln.startswith("--- "))
    return [PROMPT, lines[0].rstrip(), *[r.rstrip() for r in rows], "...", footer, REPORTS]


def block_span(readme: list[str]) -> tuple[int, int]:
    start = readme.index(PROMPT)
    end = next(i for i in range(start, len(readme)) if readme[i].startswith("```"))
    return start, end


def without_timing(row: str) -> list[str]:
    return row.split()[:-2]


def total(footer: str) -> str:
    m = re.match(r"--- (\d+) scenarios?", footer)
    return m.group(1) if m else footer


def main() -> int:
    nanchaos, run_dir, readme_path = sys.argv[1:4]
    want = generated(nanchaos, run_dir)
    with open(readme_path, encoding="utf-8") as fh:
        readme = fh.read().split("\n")
    start, end = block_span(readme)
    if "--write" in sys.argv[4:]:
        readme[start:end] = want
        with open(readme_path, "w", encoding="utf-8") as fh:
            fh.write("\n".join(readme))
        print(f"readme_sample: wrote {len(want)} lines into {readme_path}")
        return 0
    have = readme[start:end]
    problems = []
    if len(have) != len(want):
        problems.append(f"{len(have)} lines, the run gives {len(want)}")
    else:
        if have[1] != want[1]:
            problems.append(f"header differs:\n  README: {have[1]}\n  run:    {want[1]}")
        for h, w in zip(have[2:2 + ROWS], want[2:2 + ROWS]):
            if without_timing(h) != without_timing(w):
                problems.append(f"row differs:\n  README: {h}\n  run:    {w}")
        if total(have[-2]) != total(want[-2]):
            problems.append(f"footer: README says {have[-2]!r}, the run {want[-2]!r}")
    if not problems:
        print(f"readme_sample: README's sample matches {run_dir}")
        return 0
    print("readme_sample: README.md's sample output is not what the shipped suite prints:")
    for p in problems:
        print("- " + p)
    print(f"regenerate: {sys.argv[0]} {nanchaos} {run_dir} {readme_path} --write")
    return 1


if __name__ == "__main__":
    sys.exit(main())
