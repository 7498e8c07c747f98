#!/usr/bin/env python3
"""nanchaos under a real Slurm (docs/multi-node.md "Slurm"), on the cluster .ci/slurm-up makes.

Runs `salloc -N2 -n4 --oversubscribe nanchaos run ... --launcher "srun --mpi=pmix"` on the two
nodes (n1, n2) of the one-machine cluster whose slurm.conf --slurm-dir holds, and checks:

  --phase faults    scenarios/nan-activation-rank1, crash-rank1, hang-forever-rank2 pass with the
                    same verdict, outcome, detector, blamed rank, cause, dead ranks and abort
                    latency class as under mpirun (the shipped suite's run when
                    $NANCHAOS_SHIPPED_RUN/report.json has them, else run here with mpirun); the
                    4-rank jobs' steps spread 4 tasks over both nodes; the hung rank's step was
                    cancelled by Slurm; afterwards no step is left (`scontrol show step`), no
                    process of the allocation is left on the machine, and none under a slurmd.
  --phase campaign  `nanchaos campaign campaigns/mlp-default.toml --faults F --slurm-array 4`
                    (sbatch --wait of a 4-task array, then merge) gives campaign.json rows equal,
                    fault for fault, to the one-process campaign of the same seed; each task
                    measured its quarter; both wall times are printed. F is --campaign-faults
                    (200 by hand, as issue 35 asks; CTest passes 20 to keep CI short: the
                    200-fault run took 57.8 s single (--jobs 2) and 74.5 s as a 4-task array
                    (sbatch, 2 Slurm nodes on the one 2-core host, merge), rows equal,
                    2026-12-07 on a quiet host).
  --phase external  tests/slurm/ddp-env.toml (examples/pytorch/train_ddp.py, 4 ranks on 2 nodes,
                    through tests/slurm/torchrun_env.py which records what each rank was given)
                    passes, and every rank's RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
                    MASTER_ADDR, MASTER_PORT follow from Slurm's SLURM_PROCID, SLURM_NTASKS,
                    SLURM_LOCALID, SLURM_STEP_TASKS_PER_NODE, SLURM_STEP_NODELIST.
  --phase failures  tests/slurm/long-mlp.toml (4 ranks, ~0.1 s a step) in `salloc -N2 -n4`, ended
                    from outside once every rank did 3 steps: `scancel J.0` (the step), `scancel
                    J` (the allocation), `scontrol update nodename=n2 state=down` (then resumed),
                    and with --time-limit (or NANCHAOS_SLURM_TIME_LIMIT=1; 60-100 s more)
                    `salloc --time=1`. Each: report.json and junit.xml written, verdict fail,
                    the reason led by slurmstepd's "*** STEP J.0 ON n1 CANCELLED AT ... ***"
                    (with "DUE TO NODE FAILURE" / "DUE TO TIME LIMIT"), salloc's exit 1, the
                    allocation's end state, nothing of the job left; prints the seconds from the
                    action to report.json and to salloc's end.

Exits 77 (CTest SKIP_RETURN_CODE) with the reason when .ci/slurm-up found that Slurm cannot run
on this machine (it wrote <slurm-dir>/unavailable). Standard library only.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import threading
import time
import tomllib
from pathlib import Path

SKIP = 77
HERE = Path(__file__).resolve().parent
SOURCE = HERE.parent.parent
# Two slurmd on one host: Open MPI's shared-memory transport (vader) names its segments
# /dev/shm/vader_segment.<host>.<job>.<local rank>, so rank 0 of n1 and rank 2 of n2 (both local
# rank 0 on host "vm") open the same segment and crash in mca_btl_vader_poll_handle_frag. On real
# hosts the names differ; here the ranks use TCP, as tests/multinode does.
ONE_HOST_ENV = {"OMPI_MCA_btl": "self,tcp"}
LAUNCHER = "srun --mpi=pmix"


class Failures:
    def __init__(self) -> None:
        self.items: list[str] = []

    def check(self, ok: bool, what: str) -> None:
        print(("ok    " if ok else "FAIL  ") + what, flush=True)
        if not ok:
            self.items.append(what)


def scontrol(conf: Path, *args: str) -> str:
    env = dict(os.environ, SLURM_CONF=str(conf))
    return subprocess.run(["scontrol", *args], env=env, capture_output=True, text=True,
                          timeout=20).stdout


class StepWatch(threading.Thread):
    """Polls `scontrol show step -o` while the job runs: every step seen, with its nodes/tasks."""

    def __init__(self, conf: Path) -> None:
        super().__init__(daemon=True)
        self.conf = conf
        self.steps: dict[str, dict[str, str]] = {}
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            for line in scontrol(self.conf, "show", "step", "-o").splitlines():
                fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
                if "StepId" in fields:
                    self.steps[fields["StepId"]] = fields
            self.stop.wait(0.2)


def processes_of_job(job_id: str) -> list[str]:
    """Live processes whose environment says SLURM_JOB_ID=<job_id> (a rank, a step's task)."""
    marker = f"SLURM_JOB_ID={job_id}".encode()
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == os.getpid():
            continue
        try:
            env = (d / "environ").read_bytes().split(b"\0")
            state = (d / "stat").read_text().rsplit(")", 1)[1].split()[0]
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if state != "Z" and marker in env:
            found.append(f"{d.name} {cmd.strip()[:120]}")
    return found


def under_slurmd(conf: Path) -> list[str]:
    """Processes below this cluster's slurmd (slurmstepd, a step's tasks)."""
    rows = [line.split(None, 2) for line in subprocess.run(
        ["ps", "-eo", "pid=,ppid=,args="], capture_output=True, text=True).stdout.splitlines()]
    rows = [r + [""] * (3 - len(r)) for r in rows]
    parent = {r[0]: r[1] for r in rows}
    args = {r[0]: r[2] for r in rows}
    daemons = {p for p, a in args.items() if "slurmd" in a and f"-f {conf}" in a}
    found = []
    for p in parent:
        q = parent[p]
        while q in parent and q not in daemons and q not in ("0", "1"):
            q = parent[q]
        if q in daemons and p not in daemons:
            found.append(f"{p} {args[p][:120]}")
    return found


def salloc_run(nanchaos: str, conf: Path, files: list[str], out: Path,
               extra_env: dict[str, str]) -> tuple[dict, int, str, StepWatch]:
    env = dict(os.environ, SLURM_CONF=str(conf), **ONE_HOST_ENV, **extra_env)
    cmd = ["salloc", "-N2", "-n4", "--oversubscribe", "--time=10", nanchaos, "run", *files,
           "--launcher", LAUNCHER, "--out", str(out), "--quiet"]
    print("$ " + " ".join(cmd), flush=True)
    watch = StepWatch(conf)
    watch.start()
    t = time.monotonic()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240)
    watch.stop.set()
    watch.join()
    print(proc.stdout + proc.stderr, end="", flush=True)
    print(f"salloc + nanchaos run: exit {proc.returncode} after {time.monotonic() - t:.1f} s",
          flush=True)
    m = re.search(r"Granted job allocation (\d+)", proc.stderr)
    report_file = out / "report.json"
    report = json.loads(report_file.read_text()) if report_file.exists() else {"scenarios": []}
    return report, proc.returncode, m.group(1) if m else "", watch


def abort_class(sc: dict, scenario_file: Path) -> str:
    """none, or within / over the scenario's [expect].abort_within_ms."""
    lat = sc.get("abort_latency_ms")
    if lat is None:
        return "none"
    limit = tomllib.loads(scenario_file.read_text()).get("expect", {}).get("abort_within_ms")
    if limit is None:
        return "some"
    return f"<= {limit} ms" if lat <= limit else f"> {limit} ms"


def summary(sc: dict, scenario_file: Path) -> dict:
    fd = sc.get("first_detection") or {}
    pm = sc.get("postmortem") or {}
    return {
        "verdict": sc.get("verdict"),
        "outcome": sc.get("outcome"),
        "fault_outcome": sc.get("fault_outcome"),
        "detector": fd.get("detector"),
        "blamed": pm.get("ranks") if pm else ([fd["rank"]] if "rank" in fd else []),
        "cause": pm.get("cause") if pm else fd.get("cause"),
        "dead_ranks": sc.get("dead_ranks"),
        "deadlock": sc.get("deadlock"),
        "abort_latency": abort_class(sc, scenario_file),
    }


def mpirun_reference(nanchaos: str, names: list[str], files: list[Path],
                     work: Path) -> dict[str, dict]:
    """The scenarios' results under mpirun: the shipped suite's run, else run here."""
    shipped = os.environ.get("NANCHAOS_SHIPPED_RUN")
    if shipped and (Path(shipped) / "report.json").exists():
        by_name = {s["name"]: s for s in
                   json.loads((Path(shipped) / "report.json").read_text())["scenarios"]}
        if all(n in by_name for n in names):
            print(f"mpirun reference: the shipped suite's run {shipped}", flush=True)
            return by_name
    out = work / "mpirun"
    cmd = [nanchaos, "run", *map(str, files), "--launcher", "mpirun", "--out", str(out),
           "--quiet"]
    print("mpirun reference: $ " + " ".join(cmd), flush=True)
    subprocess.run(cmd, timeout=240)
    return {s["name"]: s for s in json.loads((out / "report.json").read_text())["scenarios"]}


def check_clean_after(f: Failures, conf: Path, job_id: str,
                      end_states: tuple[str, ...] = ("COMPLETED", "CANCELLED", "FAILED")) -> None:
    steps = scontrol(conf, "show", "step").strip()
    f.check(steps == "No job steps in the system", f"no step left: `scontrol show step`: {steps!r}")
    job = scontrol(conf, "show", "job", job_id) if job_id else ""
    state = re.search(r"JobState=(\S+)", job)
    f.check(bool(job_id) and (not state or state.group(1) in end_states),
            f"allocation {job_id or '(none seen)'} ended ({'/'.join(end_states)}): "
            f"{state.group(1) if state else 'purged'}")
    deadline = time.monotonic() + 10  # slurmstepd ends a moment after the step completes
    while True:
        left, below = processes_of_job(job_id), under_slurmd(conf)
        if (not left and not below) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    f.check(not left, f"no process of allocation {job_id} left on the machine: {left}")
    f.check(not below, f"no process left under a slurmd (n1, n2): {below}")


def phase_faults(nanchaos: str, conf: Path, work: Path) -> Failures:
    f = Failures()
    names = ["nan-activation-rank1", "crash-rank1", "hang-forever-rank2"]
    files = [SOURCE / "scenarios" / f"{n}.toml" for n in names]
    report, rc, job_id, watch = salloc_run(nanchaos, conf, list(map(str, files)), work / "srun",
                                           {})
    f.check(rc == 0, f"salloc nanchaos run exit status {rc} (0: every scenario passed)")
    ours = {s["name"]: s for s in report["scenarios"]}
    ref = mpirun_reference(nanchaos, names, files, work)
    for n, file in zip(names, files):
        if n not in ours:
            f.check(False, f"{n}: not in the srun run's report")
            continue
        a, b = summary(ours[n], file), summary(ref[n], file)
        f.check(a == b, f"{n}: srun {a} == mpirun {b}")
        print(f"      {n}: abort latency srun {ours[n].get('abort_latency_ms')} ms, mpirun "
              f"{ref[n].get('abort_latency_ms')} ms", flush=True)
        f.check(ours[n].get("verdict") == "pass", f"{n}: verdict {ours[n].get('verdict')} "
                f"{ours[n].get('reason', '')}")
    # Steps: one per scenario; the 4-rank ones spread over both nodes.
    four = [s for s in watch.steps.values() if s.get("Tasks") == "4"]
    print(f"      steps seen: " + "; ".join(f"{k} {v.get('NodeList')} tasks {v.get('Tasks')}"
                                             for k, v in sorted(watch.steps.items())), flush=True)
    f.check(len(four) >= 2 and all(s.get("NodeList") == "n[1-2]" for s in four),
            f"the 4-rank jobs ran as steps of 4 tasks on n[1-2]: "
            f"{[(s['StepId'], s.get('NodeList')) for s in four]}")
    hang_dir = Path(ours.get("hang-forever-rank2", {}).get("run_dir", work / "none"))
    log = (hang_dir / "ranks" / "launcher.log")
    text = log.read_text() if log.exists() else ""
    killed = set()  # srun: "n2: task 2: Killed", "n2: tasks 2-3: Killed"
    for a, b in re.findall(r"n\d: tasks? (\d+)(?:-(\d+))?: (?:Killed|Terminated)", text):
        killed.update(range(int(a), int(b or a) + 1))
    f.check(bool(re.search(r"STEP \d+\.\d+ ON n\d CANCELLED", text)) and 2 in killed,
            f"hang: Slurm cancelled the step and killed the hung rank 2 ({log}):\n"
            + "\n".join("        " + line for line in text.splitlines()))
    check_clean_after(f, conf, job_id)
    return f


def phase_external(nanchaos: str, conf: Path, work: Path) -> Failures:
    f = Failures()
    python = os.environ.get("NANCHAOS_PYTHON") or "/usr/bin/python3"
    report, rc, job_id, watch = salloc_run(nanchaos, conf, [str(HERE / "ddp-env.toml")],
                                           work / "external", {"NANCHAOS_PYTHON": python})
    sc = report["scenarios"][0] if report["scenarios"] else {}
    f.check(rc == 0 and sc.get("verdict") == "pass",
            f"ddp-env: exit {rc}, verdict {sc.get('verdict')} {sc.get('reason', '')}, outcome "
            f"{sc.get('outcome')}, detections {len(sc.get('detections') or [])}")
    run_dir = Path(sc.get("run_dir", work / "none"))
    seen = {}
    for r in range(4):
        p = run_dir / f"torchrun-env-{r}.json"
        if p.exists():
            seen[r] = json.loads(p.read_text())
    f.check(sorted(seen) == [0, 1, 2, 3], f"every rank recorded its environment: {sorted(seen)}")
    ports = {e.get("MASTER_PORT") for e in seen.values()}
    for r, e in sorted(seen.items()):
        node = int(e["SLURM_NODEID"])
        tasks_here = {"2(x2)": 2}.get(e["SLURM_STEP_TASKS_PER_NODE"])
        want = {"RANK": e["SLURM_PROCID"], "WORLD_SIZE": e["SLURM_NTASKS"],
                "LOCAL_RANK": e["SLURM_LOCALID"], "LOCAL_WORLD_SIZE": str(tasks_here),
                "MASTER_ADDR": "127.0.0.1"}
        got = {k: e.get(k) for k in want}
        f.check(got == want and e["SLURM_PROCID"] == str(r) and e["SLURM_NTASKS"] == "4",
                f"rank {r} on {e['SLURMD_NODENAME']} (node {node} of "
                f"{e['SLURM_STEP_NODELIST']}, tasks {e['SLURM_STEP_TASKS_PER_NODE']}): {got}")
    f.check(len(ports) == 1 and None not in ports, f"one MASTER_PORT for all ranks: {ports}")
    nodes = {e.get("SLURMD_NODENAME") for e in seen.values()}
    f.check(nodes == {"n1", "n2"}, f"the ranks ran on both nodes: {sorted(map(str, nodes))}")
    # MASTER_ADDR came from Slurm: the step's first node, n1, was looked up (it is a Slurm node
    # name only, so it does not resolve here) and the fallback was said on every rank's stderr.
    for r in sorted(seen):
        err = (run_dir / "ranks" / f"rank-{r}.err")
        text = err.read_text() if err.exists() else ""
        f.check("rank 0's node n1 (first of SLURM_STEP_NODELIST=n[1-2]) does not resolve" in text,
                f"rank {r}: MASTER_ADDR taken from SLURM_STEP_NODELIST's first node n1 "
                f"({err} says so)")
    check_clean_after(f, conf, job_id)
    return f


LONG_JOB = HERE / "long-mlp.toml"  # scenario "slurm-long-mlp": 4 ranks, ~0.1 s a step


class Background:
    """A command in the background (here `salloc ... nanchaos run`): its output lines as they
    come, each with the monotonic time it was read, and the job id salloc was granted."""

    def __init__(self, cmd: list[str], env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True)
        self.lines: list[tuple[float, str]] = []
        self.job_id = ""
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append((time.monotonic(), line.rstrip("\n")))
            m = re.search(r"Granted job allocation (\d+)", line)
            if m:
                self.job_id = m.group(1)

    def wait(self, timeout: float) -> int | None:
        """Its exit status, or None (and it is killed) when it did not end within `timeout` s."""
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            rc = None
        self.reader.join(5)
        return rc


def steps_done(run_dir: Path, ranks: int) -> int:
    """The fewest `step_end` events any rank of the run folder has logged so far."""
    counts = []
    for r in range(ranks):
        try:
            counts.append((run_dir / "events" / f"rank-{r}.jsonl").read_bytes()
                          .count(b'"ev":"step_end"'))
        except OSError:
            counts.append(0)
    return min(counts)


def job_steps(conf: Path, job_id: str) -> list[str]:
    """The job's running steps ("7.0"), from `scontrol show step -o`."""
    found = []
    for line in scontrol(conf, "show", "step", "-o").splitlines():
        m = re.search(r"StepId=(\d+)\.(\d+)\b", line)
        if m and m.group(1) == job_id:
            found.append(f"{m.group(1)}.{m.group(2)}")
    return found


def node_states(conf: Path) -> dict[str, str]:
    out = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %t"], capture_output=True, text=True,
                         env=dict(os.environ, SLURM_CONF=str(conf)), timeout=20).stdout
    return dict(line.split(None, 1) for line in out.splitlines() if " " in line)


IDLE_WAIT_S = 60.0
"""How long a phase waits for n1 and n2 to be idle (s). A node stays `comp` (completing) while
slurmd runs the previous phase's epilog and reports the job's end; on a loaded 2-core CI machine
that took over a second once (`n2 comp` straight after slurm.campaign)."""


def wait_nodes_idle(conf: Path, limit_s: float) -> tuple[bool, str]:
    """Polls sinfo every 0.5 s until n1 and n2 are both `idle` or limit_s passes; returns
    (both idle, the last sinfo answer or error, for the message)."""
    deadline = time.monotonic() + limit_s
    while True:
        try:
            states = node_states(conf)
            seen = f"sinfo says {states}"
        except (OSError, subprocess.SubprocessError) as e:
            states, seen = {}, f"sinfo failed: {e}"
        if states.get("n1") == "idle" and states.get("n2") == "idle":
            return True, seen
        if time.monotonic() >= deadline:
            return False, seen
        time.sleep(0.5)


def slurm_cmd(conf: Path, *cmd: str) -> str:
    """Runs a Slurm command against the test cluster; what it printed, for the log."""
    p = subprocess.run(list(cmd), env=dict(os.environ, SLURM_CONF=str(conf)),
                       capture_output=True, text=True, timeout=30)
    print(f"      $ {' '.join(cmd)}: exit {p.returncode} {(p.stdout + p.stderr).strip()}",
          flush=True)
    return p.stdout + p.stderr


def failure_case(f: Failures, nanchaos: str, conf: Path, work: Path, name: str,
                 salloc_time: str, act, want: dict) -> None:
    """One failure mode: `salloc -N2 -n4 --time=<salloc_time> nanchaos run long-mlp.toml` with
    srun as the launcher; once every rank has done 3 steps, act(conf, job_id) (returns what it
    did, for the log; a time limit does nothing); then checks what nanchaos wrote against `want`:
    verdict, a regex the reason must match, interrupted_by, the allocation's end states, and that
    nothing of the job is left. Prints the times from the action to the report and to salloc's
    end."""
    out = work / name
    env = dict(os.environ, SLURM_CONF=str(conf), **ONE_HOST_ENV)
    cmd = ["salloc", "-N2", "-n4", "--oversubscribe", f"--time={salloc_time}", nanchaos, "run",
           str(LONG_JOB), "--launcher", LAUNCHER, "--out", str(out), "--quiet"]
    print(f"---- {name}\n$ " + " ".join(cmd), flush=True)
    t_start = time.monotonic()
    run = Background(cmd, env)
    run_dir = out / "slurm-long-mlp"
    deadline = time.monotonic() + 120
    while steps_done(run_dir, 4) < 3 and run.proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    running = steps_done(run_dir, 4) >= 3 and run.proc.poll() is None
    f.check(running, f"{name}: the job ran (every rank did 3 steps) after "
            f"{time.monotonic() - t_start:.1f} s, job {run.job_id or '(no allocation seen)'}")
    if not running:
        run.wait(30)
        print("\n".join(line for _, line in run.lines), flush=True)
        return
    wall_act = time.time()
    m_act = time.monotonic()
    did = act(conf, run.job_id)
    rc = run.wait(240)
    m_end = time.monotonic()
    for t, line in run.lines:
        print(f"      [{t - m_act:+7.1f} s] {line}", flush=True)
    f.check(rc is not None, f"{name}: salloc ended (exit {rc}) {m_end - m_act:.1f} s after: {did}")
    report_file, junit_file = out / "report.json", out / "junit.xml"
    report = json.loads(report_file.read_text()) if report_file.exists() else {}
    sc = (report.get("scenarios") or [{}])[0]
    after = report_file.stat().st_mtime - wall_act if report_file.exists() else float("nan")
    print(f"      {name}: {did}; report.json written {after:.1f} s later, salloc exit {rc} "
          f"{m_end - m_act:.1f} s later; steps done {sc.get('steps_completed')}; verdict "
          f"{sc.get('verdict')}, outcome {sc.get('outcome')}, interrupted_by "
          f"{sc.get('interrupted_by')}, launcher_exit {sc.get('launcher_exit')}\n"
          f"      reason: {sc.get('reason')}", flush=True)
    f.check(report_file.exists() and junit_file.exists(),
            f"{name}: report.json and junit.xml written ({out})")
    f.check(sc.get("verdict") == want["verdict"],
            f"{name}: verdict {sc.get('verdict')} (want {want['verdict']})")
    f.check(bool(re.search(want["reason"], str(sc.get("reason")))),
            f"{name}: the reason says what Slurm did (/{want['reason']}/): {sc.get('reason')!r}")
    f.check(sc.get("interrupted_by") == want.get("interrupted_by"),
            f"{name}: interrupted_by {sc.get('interrupted_by')} (want "
            f"{want.get('interrupted_by')})")
    if junit_file.exists():
        junit = junit_file.read_text()
        f.check('name="slurm-long-mlp"' in junit and ("<failure" in junit or "<error" in junit),
                f"{name}: junit.xml has the scenario as a failure or error")
    if "rc" in want:
        f.check(rc == want["rc"], f"{name}: salloc's exit status {rc} (want {want['rc']})")
    check_clean_after(f, conf, run.job_id, want["end_states"])


def act_cancel_step(conf: Path, job_id: str) -> str:
    steps = job_steps(conf, job_id)
    if not steps:
        return f"no step of job {job_id} to cancel"
    slurm_cmd(conf, "scancel", steps[0])
    return f"scancel {steps[0]} (the step srun runs)"


def act_cancel_job(conf: Path, job_id: str) -> str:
    slurm_cmd(conf, "scancel", job_id)
    return f"scancel {job_id} (the allocation)"


def act_node_down(conf: Path, job_id: str) -> str:
    nodes = re.search(r"\bNodeList=(\S+)", scontrol(conf, "show", "job", job_id))
    node = "n2" if nodes and "2" in nodes.group(1) else "n1"
    slurm_cmd(conf, "scontrol", "update", f"nodename={node}", "state=down",
              "reason=nanchaos-failures-test")
    return f"scontrol update nodename={node} state=down (a node of job {job_id})"


def act_wait(conf: Path, job_id: str) -> str:
    return f"nothing (job {job_id} runs into its time limit)"


def restore_nodes(f: Failures, conf: Path) -> None:
    """Every node back to idle after a case set one down."""
    for node, state in node_states(conf).items():
        if not state.startswith("idle"):
            slurm_cmd(conf, "scontrol", "update", f"nodename={node}", "state=resume")
    ok, seen = wait_nodes_idle(conf, IDLE_WAIT_S)
    f.check(ok, f"both nodes idle again for the next phases: {seen}")


def phase_failures(nanchaos: str, conf: Path, work: Path, time_limit: bool) -> Failures:
    f = Failures()
    # What slurm-wlm 22.05 did (docs/multi-node.md "Failure modes under Slurm"): in each case
    # srun's step was cancelled at once (slurmstepd: "*** STEP J.0 ON n1 CANCELLED AT ... ***"),
    # srun exited 137 or 143 within a second, and nanchaos judged the job before salloc's SIGHUP
    # (allocation revoked) could reach it: verdict fail, its reason naming Slurm's cancellation
    # (not "rank(s) 0, 1, 2, 3 ended with no exit record" alone), and exit 1, which salloc passes
    # on. The allocation then ends FAILED (salloc gives Slurm the command's status), CANCELLED,
    # NODE_FAIL or TIMEOUT.
    cancelled = r"^Slurm cancelled the job step from outside \(\*\*\* STEP \d+\.0 ON n1 CANCELLED AT "
    cases = [
        ("step-cancelled", "10", act_cancel_step,
         {"verdict": "fail", "reason": cancelled + r"\S+ \*\*\*", "rc": 1,
          "end_states": ("FAILED",)}),
        ("allocation-cancelled", "10", act_cancel_job,
         {"verdict": "fail", "reason": cancelled + r"\S+ \*\*\*", "rc": 1,
          "end_states": ("CANCELLED",)}),
        ("node-down", "10", act_node_down,
         {"verdict": "fail", "reason": cancelled + r"\S+ DUE TO NODE FAILURE", "rc": 1,
          "end_states": ("NODE_FAIL",)}),
    ]
    if time_limit:
        cases.append(("time-limit", "1", act_wait,
                      {"verdict": "fail", "reason": cancelled + r"\S+ DUE TO TIME LIMIT",
                       "rc": 1, "end_states": ("TIMEOUT",)}))
    for name, salloc_time, act, want in cases:
        t = time.monotonic()
        try:
            failure_case(f, nanchaos, conf, work, name, salloc_time, act, want)
        finally:
            restore_nodes(f, conf)
        print(f"      {name}: {time.monotonic() - t:.1f} s in all", flush=True)
    return f


def campaign_row(fault: dict) -> dict:
    """A campaign.json row less what differs between two runs of the same draw (times, paths)."""
    row = {k: v for k, v in fault.items() if k not in ("wall_ms", "latency_ms", "rerun")}
    if isinstance(row.get("harness_named"), dict):
        row["harness_named"] = {k: v for k, v in row["harness_named"].items()
                                if k != "latency_ms"}
    return row


def phase_campaign(nanchaos: str, conf: Path, work: Path, faults: int) -> Failures:
    f = Failures()
    env = dict(os.environ, SLURM_CONF=str(conf), **ONE_HOST_ENV)
    base = [nanchaos, "campaign", str(SOURCE / "campaigns" / "mlp-default.toml"), "--faults",
            str(faults), "--seed", "2", "--quiet"]
    t = time.monotonic()
    single = subprocess.run(base + ["--jobs", "2", "--out", str(work / "single")], env=env,
                            capture_output=True, text=True)
    single_s = time.monotonic() - t
    t = time.monotonic()
    array = subprocess.run(base + ["--slurm-array", "4", "--out", str(work / "array")], env=env,
                           capture_output=True, text=True)
    array_s = time.monotonic() - t
    print(f"campaign of {faults} faults: one process --jobs 2 {single_s:.1f} s; "
          f"--slurm-array 4 (sbatch, 4 tasks on the 2 nodes, merge) {array_s:.1f} s", flush=True)
    f.check(single.returncode in (0, 1), f"single campaign exit {single.returncode}: "
            f"{single.stderr[-500:]}")
    f.check(array.returncode == single.returncode,
            f"--slurm-array 4 exit {array.returncode} (single {single.returncode}): "
            f"{array.stderr[-800:]}")
    one_path, merged_path = work / "single" / "campaign.json", work / "array" / "campaign.json"
    if not (one_path.exists() and merged_path.exists()):
        f.check(False, f"both campaign.json written ({one_path}, {merged_path})")
        return f
    one, merged = json.loads(one_path.read_text()), json.loads(merged_path.read_text())
    diff = [a["index"] for a, b in zip(one["faults"], merged["faults"])
            if campaign_row(a) != campaign_row(b)]
    f.check(len(merged["faults"]) == len(one["faults"]) == faults and not diff,
            f"merged rows equal the single run's: {len(merged['faults'])} rows, differing at "
            f"{diff[:10]}")
    for i in range(1, 5):
        part = work / "array" / f"shard-{i}" / "campaign.json"
        idx = [r["index"] for r in json.loads(part.read_text())["faults"]] if part.exists() else []
        f.check(idx == list(range(i - 1, faults, 4)),
                f"array task {i} measured the faults with index mod 4 = {i - 1} ({len(idx)})")
    f.check(one["summary"]["coverage"] == merged["summary"]["coverage"] and
            one["thresholds"] == merged["thresholds"],
            f"summary and thresholds recomputed equal: {merged['summary']['coverage']}")
    left = scontrol(conf, "show", "job")
    f.check("nanchaos-campaign" not in left or "JobState=COMPLETED" in left,
            "no array task left pending or running")
    return f


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nanchaos", required=True, help="the nanchaos binary")
    ap.add_argument("--slurm-dir", required=True, help="the folder .ci/slurm-up set up")
    ap.add_argument("--work", required=True, help="run folders go here (emptied first)")
    ap.add_argument("--phase", choices=["faults", "external", "campaign", "failures"],
                    required=True)
    ap.add_argument("--campaign-faults", type=int, default=200,
                    help="faults of --phase campaign (default 200)")
    ap.add_argument("--time-limit", action="store_true",
                    help="--phase failures: also the allocation's time limit (salloc --time=1; "
                         "costs 60-100 s more, so not in CTest's slurm.failures unless "
                         "NANCHAOS_SLURM_TIME_LIMIT=1)")
    args = ap.parse_args()
    slurm_dir = Path(args.slurm_dir)
    if (slurm_dir / "unavailable").exists():
        print(f"slurm: SKIPPED: {(slurm_dir / 'unavailable').read_text().strip()}", flush=True)
        return SKIP
    conf = slurm_dir / "slurm.conf"
    ok, seen = wait_nodes_idle(conf, IDLE_WAIT_S)
    if not ok:
        print(f"slurm: the cluster of {conf} is not up with n1 and n2 idle after {IDLE_WAIT_S:.0f} s "
              f"(run .ci/slurm-up {slurm_dir}): {seen}", flush=True)
        return 1
    work = Path(args.work) / args.phase
    subprocess.run(["rm", "-rf", str(work)], check=True)
    work.mkdir(parents=True)
    t = time.monotonic()
    if args.phase == "campaign":
        f = phase_campaign(args.nanchaos, conf, work, args.campaign_faults)
    elif args.phase == "failures":
        f = phase_failures(args.nanchaos, conf, work,
                           args.time_limit or os.environ.get("NANCHAOS_SLURM_TIME_LIMIT") == "1")
    else:
        phase = phase_faults if args.phase == "faults" else phase_external
        f = phase(args.nanchaos, conf, work)
    print(f"slurm {args.phase}: {len(f.items)} failure(s), {time.monotonic() - t:.1f} s",
          flush=True)
    return 1 if f.items else 0


if __name__ == "__main__":
    sys.exit(main())
