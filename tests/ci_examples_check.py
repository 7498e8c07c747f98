#!/usr/bin/env python3
"""Runs the shell steps of docs/ci.md's GitHub Actions and GitLab CI jobs as written.

usage: ci_examples_check.py NANCHAOS_BINARY SOURCE_DIR WORK_DIR

Each job runs in its own folder under WORK_DIR that holds links to the checkout's scenarios/
and results/ and to the built binary (as build/nanchaos), with SUITE set to three quick
shipped scenarios instead of the whole suite. The build steps (install-deps, cmake) are not run:
the binary is the one under test; every other step is, with bash -e as the runners use. Checks:
the suite step exits 0, the compare step exits 0 and writes compare.md, and every artifact path
the job uploads exists. Exit 0 when all hold, 1 with one line per failure otherwise.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import yaml

SUITE = ("scenarios/clean-transformer-2ranks.toml scenarios/fp16-overflow-one-rank.toml "
         "scenarios/crash-rank1.toml")
BUILD_WORDS = (".ci/install-deps", "cmake ")


def yaml_blocks(doc: str) -> list[dict]:
    return [yaml.safe_load(b) for b in re.findall(r"```yaml\n(.*?)```", doc, re.DOTALL)]


def workspace(root: str, name: str, binary: str, src: str) -> str:
    ws = os.path.join(root, name)
    shutil.rmtree(ws, ignore_errors=True)
    os.makedirs(os.path.join(ws, "build"))
    for d in ("scenarios", "results"):
        os.symlink(os.path.join(src, d), os.path.join(ws, d))
    os.symlink(os.path.abspath(binary), os.path.join(ws, "build", "nanchaos"))
    return ws


def sh(script: str, ws: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-e", "-c", script], cwd=ws, env=env, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=False)


def is_build(script: str) -> bool:
    lines = [ln.strip() for ln in script.strip().splitlines() if ln.strip()]
    return all(ln.startswith(BUILD_WORDS) for ln in lines)


def main() -> int:
    binary, src, work = sys.argv[1:4]
    with open(os.path.join(src, "docs", "ci.md"), encoding="utf-8") as fh:
        blocks = yaml_blocks(fh.read())
    failures: list[str] = []

    def check(ok: bool, what: str) -> None:
        print(("ok    " if ok else "FAIL  ") + what)
        if not ok:
            failures.append(what)

    github = next(b for b in blocks if "jobs" in b)
    gitlab = next(b for b in blocks if "nanchaos" in b and "script" in b["nanchaos"])

    # GitHub Actions: every `run:` step but the build, in order, each its own bash -e.
    job = github["jobs"]["chaos"]
    ws = workspace(work, "github", binary, src)
    env = dict(os.environ, SUITE=SUITE)
    skipped = 0
    for step in job["steps"]:
        if "run" not in step:
            continue
        if is_build(step["run"]):
            skipped += 1
            continue
        r = sh(step["run"], ws, env)
        sys.stdout.write(r.stdout[-3000:])
        check(r.returncode == 0, f"github step {step.get('name')!r} exits 0 (got {r.returncode})")
    check(skipped == 1, f"github: exactly one build step left out (got {skipped})")
    uploads = next(s for s in job["steps"] if str(s.get("uses", "")).startswith(
        "actions/upload-artifact"))
    for path in uploads["with"]["path"].split():
        check(os.path.exists(os.path.join(ws, path)), f"github artifact {path} exists")
    with open(os.path.join(ws, "compare.md"), encoding="utf-8") as fh:
        md = fh.read()
    check(md.startswith("### nanchaos compare") and "3 shared scenario(s)" in md,
          "github compare.md is the comparison of the 3 scenarios")

    # GitLab CI: the script lines but the build, then after_script, as one shell each.
    job = gitlab["nanchaos"]
    ws = workspace(work, "gitlab", binary, src)
    env = dict(os.environ, **{k: v for k, v in job["variables"].items()})
    env["SUITE"] = SUITE
    script = [ln for ln in job["script"] if not is_build(ln)]
    check(len(job["script"]) - len(script) == 2, "gitlab: the two build lines left out")
    for line in script:
        r = sh(line, ws, env)
        sys.stdout.write(r.stdout[-3000:])
        check(r.returncode == 0, f"gitlab script {line!r} exits 0 (got {r.returncode})")
    for line in job["after_script"]:
        r = sh(line, ws, env)
        check(r.returncode == 0, f"gitlab after_script {line!r} exits 0 (got {r.returncode})")
    for path in job["artifacts"]["paths"] + [job["artifacts"]["reports"]["junit"]]:
        check(os.path.exists(os.path.join(ws, path)), f"gitlab artifact {path} exists")

    print(f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
