#!/usr/bin/env python3
"""Runs nanchaos's benchmarks as interleaved repetitions and keeps their raw output.

Every figure in bench/README.md comes from a file this script wrote under bench/results/ and
from `bench/run.py summarize` of that file. Three commands:

  bench/run.py measure [--build build] [--reps 5] [--programs step,consensus,scan,campaign,agent]
                       [--out bench/results/NAME.json] [--note TEXT] [--extra NAME=COMMAND]
  bench/run.py summarize FILE [--markdown] [--json] [--program NAME] [--counter REGEX]
  bench/run.py check FILE...
  bench/run.py readme bench/README.md

measure
  Runs each program once per repetition, the programs in a rotated order (repetition r starts
  with program r mod P), so a neighbour's burst or a thermal drift hits every program alike and
  no program always runs first. Each run is one whole program: its ratios (`ratio_vs_none`,
  `ratio_vs_bare`, `ratio_vs_read`, `ratio_vs_one_launch`, `ratio_vs_detached`) are measured side
  by side inside that run; the repetitions give their spread. The step benchmark runs one round
  per repetition (NANCHAOS_BENCH_ROUNDS=1, NANCHAOS_BENCH_FIRST_ROUND=r, so its stack order still
  rotates); the agent benchmark runs `--rounds 2` per repetition.
  The output file holds, per run: the program, repetition, position in the repetition, start time
  (UTC), wall time (s), the 1-minute load average before and after (os.getloadavg), the exit
  status, the parsed JSON the program printed (Google Benchmark's --benchmark_format=json, or
  agent_overhead.py's object) and the last 2000 characters of its stderr; and once: the host
  (CPU model, nproc, memory GiB, kernel, OS, compiler, LibTorch, Open MPI, the agent's torch),
  the git commit (and whether the tree was dirty), the command line and the plan.
  A run that fails is kept (rc != 0) and the script exits 1 at the end.

summarize
  Per program, benchmark row and counter: median, min, max and interquartile range over the
  repetitions, and n. Counters shown are the ratios (names starting with `ratio`) and the few
  absolute figures the README quotes (KEY_COUNTERS). --markdown prints the table bench/README.md
  pastes; --json prints the same as JSON.

check
  Exits 1 unless each FILE is a complete result: schema 1, the host and git fields, at least 5
  repetitions of every program it names, every run with rc 0 and the same rows and ratio counters
  in every repetition. CTest runs it on every committed bench/results/*.json.

readme
  Exits 1 unless every table of figures in the README (a Markdown table with a cell that starts
  with a number: "1.02", "198", "0.26 %") is traceable: the table, or the paragraph just above
  it, names a `bench/results/*.json` file that exists and passes `check`. Tables of names and
  definitions are exempt.

Quartiles are linear-interpolated (statistics.quantiles, method "inclusive"). Loads and times are
the host's; a result says nothing about another machine.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

SCHEMA = 1
MIN_REPS = 5
ROOT = Path(__file__).resolve().parent.parent

# Absolute counters worth a median beside the ratios (the README quotes them).
KEY_COUNTERS = {
    "step_ms", "step_p50_ms", "cpu_ms", "localize_ms", "replica_check_ms",
    "localize_share_of_step", "replica_share_of_step", "faults_per_min", "bare_p50_us",
    "consensus_p50_us", "payload_bytes", "bytes_per_second", "detached_ms_p50",
    "faults_per_min_one_launch", "faults_per_min_in_launch", "ratio_cpu_vs_detached",
    "attached_ms_p50", "rows_equal", "detections", "sdc_recompute_ms", "sdc_share_of_step",
    "sdc_every100_overhead", "resume_ms", "detect_ms", "teardown_ms", "relaunch_ms", "load_ms",
    "first_step_ms", "steps_lost", "import_ms", "resume_less_import_ms",
}


def default_python() -> str:
    """The interpreter agent_overhead.py's jobs use: /usr/bin/python3 when it imports torch."""
    for py in ("/usr/bin/python3", sys.executable):
        if subprocess.run([py, "-c", "import torch"], capture_output=True).returncode == 0:
            return py
    return sys.executable


def programs(build: Path, python: str) -> dict[str, dict]:
    """name -> {"cmd": argv, "env": {...}, "per_rep_env": callable(rep) -> {...}}."""
    b = build / "bench"
    gb = ["--benchmark_format=json"]
    return {
        "step": {"cmd": [str(b / "nanchaos_bench_step"), *gb],
                 "per_rep_env": lambda r: {"NANCHAOS_BENCH_ROUNDS": "1",
                                           "NANCHAOS_BENCH_FIRST_ROUND": str(r)}},
        "consensus": {"cmd": [str(b / "nanchaos_bench_consensus"), *gb]},
        "scan": {"cmd": [str(b / "nanchaos_bench_scan"), *gb]},
        "campaign": {"cmd": [str(b / "nanchaos_bench_campaign"), *gb]},
        "agent": {"cmd": [sys.executable, str(ROOT / "bench" / "agent_overhead.py"),
                          "--python", python, "--rounds", "2"]},
        # The FSDP2 example's job (torch >= 2.4: give --python a torch 2.x interpreter).
        "agent_fsdp2": {"cmd": [sys.executable, str(ROOT / "bench" / "agent_overhead.py"),
                                "--python", python, "--model", "fsdp2", "--rounds", "2"]},
    }


def sh(cmd: str) -> str:
    """First line of a shell command's output, or "" (host facts are best effort)."""
    try:
        out = subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=30)
        return (out.stdout or out.stderr).strip().splitlines()[0] if (out.stdout or out.stderr) else ""
    except (subprocess.SubprocessError, IndexError):
        return ""


def host_facts(build: Path, python: str) -> dict:
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_gib = 0.0
    try:
        kb = int(re.search(r"MemTotal:\s+(\d+)", Path("/proc/meminfo").read_text()).group(1))
        mem_gib = round(kb / 2**20, 1)
    except (OSError, AttributeError):
        pass
    cache = {}
    try:
        for line in (build / "CMakeCache.txt").read_text().splitlines():
            m = re.match(r"([A-Za-z_]+):[A-Z]+=(.*)", line)
            if m:
                cache[m.group(1)] = m.group(2)
    except OSError:
        pass
    torch_dir = cache.get("Torch_DIR", "")
    debian = sh("cat /etc/debian_version")
    return {
        "cpu_model": cpu,
        "nproc": os.cpu_count(),
        "mem_gib": mem_gib,
        "kernel": platform.release(),
        "os": f"Debian {debian}" if debian else platform.platform(),
        "compiler": sh(shlex.quote(cache.get("CMAKE_CXX_COMPILER", "c++")) + " --version"),
        "build_type": cache.get("CMAKE_BUILD_TYPE", ""),
        "libtorch_dir": torch_dir,
        "mpirun": sh("mpirun --version"),
        # The BLAS Debian's LibTorch and python3-torch load (libblas.so.3, an alternative): the
        # reference BLAS makes the built-in jobs' steps ~3x slower than OpenBLAS.
        "blas": os.path.realpath("/usr/lib/x86_64-linux-gnu/libblas.so.3"),
        "agent_python": python,
        "agent_torch": python and sh(shlex.quote(python) +
                                     " -c 'import torch; print(torch.__version__)'"),
    }


def git_facts() -> dict:
    commit = sh(f"git -C {shlex.quote(str(ROOT))} rev-parse HEAD")
    dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True).stdout.strip()
    return {"commit": commit, "dirty": bool(dirty)}


def parse_output(text: str):
    """The JSON object a program printed on stdout (the last one when there is other text)."""
    text = text.strip()
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        start = text.rfind("\n{")
        return json.loads(text[start + 1:]) if start >= 0 else None


def rows_of(raw) -> dict[str, dict[str, float]]:
    """Benchmark rows -> numeric counters. Google Benchmark: one row per non-aggregate entry;
    a flat object (agent_overhead.py): one row, "agent"."""
    if not isinstance(raw, dict):
        return {}
    if "benchmarks" in raw:
        rows = {}
        for b in raw["benchmarks"]:
            if b.get("run_type") == "aggregate" or b.get("error_occurred"):
                continue
            rows[b["name"]] = {k: float(v) for k, v in b.items()
                               if isinstance(v, (int, float)) and not isinstance(v, bool)}
        return rows
    return {"agent": {k: float(v) for k, v in raw.items()
                      if isinstance(v, (int, float)) and not isinstance(v, bool)}}


def measure(args) -> int:
    build = Path(args.build).resolve()
    wants_agent = bool({"agent", "agent_fsdp2"} & set(args.programs.split(",")))
    python = args.python or (default_python() if wants_agent else "")
    table = programs(build, python)
    for spec in args.extra:
        name, _, cmd = spec.partition("=")
        if not name or not cmd:
            sys.exit(f"bench/run.py: --extra wants NAME=COMMAND, got {spec!r}")
        table[name] = {"cmd": shlex.split(cmd)}
    chosen = [p.strip() for p in args.programs.split(",") if p.strip()] + \
        [s.partition("=")[0] for s in args.extra]
    for p in chosen:
        if p not in table:
            sys.exit(f"bench/run.py: unknown program {p!r} (known: {', '.join(table)})")
        exe = table[p]["cmd"][0]
        if not (Path(exe).exists() or shutil.which(exe)):
            sys.exit(f"bench/run.py: {p}: {exe} not found (build it: cmake --build {build} -j2)")
    if args.reps < 1:
        sys.exit("bench/run.py: --reps must be >= 1")
    out = Path(args.out) if args.out else ROOT / "bench" / "results" / (
        dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H%MZ") + ".json")
    out.parent.mkdir(parents=True, exist_ok=True)
    result = {
        "schema": SCHEMA,
        "created_utc": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "command": sys.argv,
        "note": args.note,
        "git": git_facts(),
        "host": host_facts(build, python),
        "plan": {"reps": args.reps, "programs": chosen,
                 "commands": {p: table[p]["cmd"] for p in chosen},
                 "order": "repetition r runs the programs rotated by r"},
        "runs": [],
    }
    failed = 0
    for rep in range(args.reps):
        order = chosen[rep % len(chosen):] + chosen[:rep % len(chosen)]
        for pos, name in enumerate(order):
            spec = table[name]
            env = dict(os.environ, NANCHAOS_BENCH_REP=str(rep))
            env.pop("NANCHAOS_BENCH_QUICK", None)
            env.update(spec.get("env", {}))
            if "per_rep_env" in spec:
                env.update(spec["per_rep_env"](rep))
            load_before = os.getloadavg()[0]
            started = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
            t0 = time.monotonic()
            print(f"bench/run.py: rep {rep + 1}/{args.reps} {name} (load {load_before:.2f})",
                  file=sys.stderr, flush=True)
            proc = subprocess.run(spec["cmd"], capture_output=True, text=True, env=env,
                                  cwd=ROOT, timeout=args.timeout)
            wall = time.monotonic() - t0
            raw = None
            try:
                raw = parse_output(proc.stdout)
            except json.JSONDecodeError:
                pass
            rc = proc.returncode if raw is not None else (proc.returncode or 1)
            failed += rc != 0
            result["runs"].append({
                "program": name, "rep": rep, "position": pos, "started_utc": started,
                "wall_s": round(wall, 2), "load_before": round(load_before, 2),
                "load_after": round(os.getloadavg()[0], 2), "rc": rc, "output": raw,
                "stderr_tail": proc.stderr[-2000:],
            })
            out.write_text(json.dumps(result, indent=1) + "\n")  # nothing measured is lost
    print(f"bench/run.py: wrote {out}", file=sys.stderr)
    print(render(summary(result), markdown=False))
    return 1 if failed else 0


def spread(values: list[float]) -> dict:
    v = sorted(values)
    q1, _, q3 = statistics.quantiles(v, n=4, method="inclusive") if len(v) > 1 else (v[0],) * 3
    return {"median": statistics.median(v), "min": v[0], "max": v[-1], "q1": q1, "q3": q3,
            "n": len(v)}


def summary(result: dict) -> list[dict]:
    """[{program, row, counter, median, min, max, q1, q3, n}] over the runs with rc 0."""
    per: dict[tuple, list[float]] = {}
    order: list[tuple] = []
    for run in result["runs"]:
        if run["rc"] != 0:
            continue
        for row, counters in rows_of(run["output"]).items():
            for k, v in counters.items():
                if not (k.startswith("ratio") or k in KEY_COUNTERS):
                    continue
                key = (run["program"], row, k)
                if key not in per:
                    per[key] = []
                    order.append(key)
                per[key].append(v)
    return [{"program": p, "row": r, "counter": c, **spread(per[(p, r, c)])} for p, r, c in order]


def fmt(x: float) -> str:
    if x == 0:
        return "0"
    a = abs(x)
    if a >= 1e6:
        return f"{x:.3g}"
    if a >= 100:
        return f"{x:.0f}"
    if a >= 10:
        return f"{x:.1f}"
    return f"{x:.3f}"


def render(rows: list[dict], markdown: bool) -> str:
    lines = []
    if markdown:
        lines += ["| Program | Row | Counter | Median | Min-max | IQR | n |",
                  "|---|---|---|--:|--:|--:|--:|"]
        for s in rows:
            lines.append(f"| {s['program']} | `{s['row']}` | `{s['counter']}` | {fmt(s['median'])}"
                         f" | {fmt(s['min'])}-{fmt(s['max'])} | {fmt(s['q1'])}-{fmt(s['q3'])}"
                         f" | {s['n']} |")
    else:
        for s in rows:
            lines.append(f"{s['program']:<10} {s['row']:<48} {s['counter']:<26} "
                         f"median {fmt(s['median']):>8}  [{fmt(s['min'])}, {fmt(s['max'])}]"
                         f"  IQR [{fmt(s['q1'])}, {fmt(s['q3'])}]  n={s['n']}")
    return "\n".join(lines)


def load(path: str) -> dict:
    try:
        return json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as e:
        sys.exit(f"bench/run.py: {path}: {e}")


def check_one(path: str) -> list[str]:
    """Problems that make a result file unfit to quote (empty when it is complete)."""
    r = load(path)
    bad = []
    if r.get("schema") != SCHEMA:
        bad.append(f"schema {r.get('schema')!r}, want {SCHEMA}")
    for k in ("cpu_model", "nproc", "mem_gib", "kernel"):
        if not r.get("host", {}).get(k):
            bad.append(f"host.{k} missing")
    if not r.get("git", {}).get("commit"):
        bad.append("git.commit missing")
    runs = r.get("runs", [])
    for p in r.get("plan", {}).get("programs", []):
        mine = [x for x in runs if x["program"] == p]
        if len(mine) < MIN_REPS:
            bad.append(f"{p}: {len(mine)} repetitions, want >= {MIN_REPS}")
        for x in mine:
            if x["rc"] != 0:
                bad.append(f"{p} rep {x['rep']}: rc {x['rc']}")
            for k in ("started_utc", "wall_s", "load_before", "load_after"):
                if k not in x:
                    bad.append(f"{p} rep {x['rep']}: {k} missing")
        shapes = {json.dumps(sorted((row, sorted(c for c in cs if c.startswith("ratio")))
                                    for row, cs in rows_of(x["output"]).items()))
                  for x in mine if x["rc"] == 0}
        if len(shapes) > 1:
            bad.append(f"{p}: repetitions differ in their rows or ratio counters")
        if mine and not any(c.startswith("ratio") for x in mine
                            for cs in rows_of(x["output"]).values() for c in cs):
            bad.append(f"{p}: no ratio counter in any repetition")
    return bad


def readme_problems(path: str, results_dir: Path) -> list[str]:
    """Tables of figures in a README that cite no complete result file (bench/results/NAME is
    looked up as results_dir/NAME)."""
    lines = Path(path).read_text().splitlines()
    bad, i = [], 0
    checked: dict[str, list[str]] = {}
    while i < len(lines):
        if not lines[i].startswith("|"):
            i += 1
            continue
        start = i
        while i < len(lines) and lines[i].startswith("|"):
            i += 1
        body = lines[start + 2:i]
        cells = [c.strip().strip("*").strip() for row in body for c in row.strip("|").split("|")]
        if not any(re.match(r"\d+(\.\d+)?(\s|$|x\b|%)", c) for c in cells):
            continue  # a table of names and definitions: no cell is a measured number
        above = start - 1
        while above >= 0 and lines[above].strip() == "":
            above -= 1
        context = []
        while above >= 0 and lines[above].strip() and not lines[above].startswith("|"):
            context.append(lines[above])
            above -= 1
        cited = re.findall(r"bench/results/([\w.-]+\.json)", " ".join(context + lines[start:i]))
        where = f"{path}:{start + 1}"
        if not cited:
            bad.append(f"{where}: a table of figures cites no bench/results/*.json")
            continue
        for name in cited:
            f = results_dir / name
            if not f.exists():
                bad.append(f"{where}: cites bench/results/{name}, which does not exist")
            elif name not in checked:
                checked[name] = check_one(str(f))
                bad += [f"{where}: bench/results/{name}: {p}" for p in checked[name]]
    return bad


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("measure", help="run the benchmarks, write a result file")
    m.add_argument("--build", default=str(ROOT / "build"))
    m.add_argument("--reps", type=int, default=MIN_REPS)
    m.add_argument("--programs", default="step,consensus,scan,campaign,agent")
    m.add_argument("--extra", action="append", default=[], metavar="NAME=COMMAND",
                   help="one more program printing Google Benchmark JSON (repeatable)")
    m.add_argument("--python", default=None, help="interpreter for the agent benchmark's jobs")
    m.add_argument("--out", default=None)
    m.add_argument("--note", default="")
    m.add_argument("--timeout", type=float, default=3600, help="seconds per program run")
    s = sub.add_parser("summarize", help="median and spread per counter")
    s.add_argument("file")
    s.add_argument("--markdown", action="store_true")
    s.add_argument("--json", action="store_true")
    s.add_argument("--program", default=None, help="only this program's rows")
    s.add_argument("--counter", default=None, help="only counters matching this regex")
    c = sub.add_parser("check", help="exit 1 unless every file is a complete result")
    c.add_argument("files", nargs="+")
    r = sub.add_parser("readme", help="exit 1 unless every table of figures cites a result")
    r.add_argument("file")
    r.add_argument("--results-dir", default=str(ROOT / "bench" / "results"),
                   help="where bench/results/NAME.json citations are looked up")
    args = ap.parse_args(argv)
    if args.cmd == "readme":
        problems = readme_problems(args.file, Path(args.results_dir))
        for p in problems:
            print(p, file=sys.stderr)
        if not problems:
            print(f"{args.file}: every table of figures cites a complete result")
        return 1 if problems else 0
    if args.cmd == "measure":
        return measure(args)
    if args.cmd == "summarize":
        rows = [x for x in summary(load(args.file))
                if (args.program is None or x["program"] == args.program)
                and (args.counter is None or re.search(args.counter, x["counter"]))]
        print(json.dumps(rows, indent=1) if args.json else render(rows, args.markdown))
        return 0
    status = 0
    for f in args.files:
        problems = check_one(f)
        for p in problems:
            print(f"{f}: {p}", file=sys.stderr)
        status |= bool(problems)
        if not problems:
            print(f"{f}: complete")
    return status


if __name__ == "__main__":
    sys.exit(main())
