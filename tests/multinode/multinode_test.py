#!/usr/bin/env python3
"""Ranks on two hosts over a real network, on one machine (docs/multi-node.md).

Makes two hosts out of network namespaces (iproute2: a bridge, a veth pair per host, addresses
10.77.X.11 and .12), runs nanchaos with Open MPI across them (a hostfile, the launch agent
tests/multinode/nsrsh that enters a host's namespace with its own host name and PID namespace,
the TCP transport on the veth links), and checks the report:

  --phase faults     scenarios/nan-activation-rank1, crash-rank1, hang-forever-rank2: pass,
                     the blamed rank, the ranks' hosts and PID namespaces, abort latency across
                     hosts, the measured clock offsets, and no process of the job left on any host.
  --phase slow_link  tests/multinode/slow-link.toml with both hosts' links shaped by tc tbf:
                     the job completes, is not called hung, deadlock false, and the shaper did
                     delay packets (its overlimits counter).

Needs root (CAP_NET_ADMIN); exits 77 (CTest SKIP_RETURN_CODE) with the reason when namespaces
cannot be made. Names carry this process's pid, so instances in parallel do not collide, and a
namespace left by an instance that was killed (SIGKILL at a CTest timeout) is removed by the next.
Everything this test sets up is torn down on every exit path it can catch.

Standard library only.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SKIP = 77
HERE = Path(__file__).resolve().parent
SOURCE = HERE.parent.parent


def sh(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(list(args), check=check, capture_output=True, text=True)


class Hosts:
    """N hosts nc<pid>h1..N on bridge ncb<pid>, subnet 10.77.<x>.0/24 (x free on this machine)."""

    def __init__(self, n: int = 2) -> None:
        self.tag = str(os.getpid())
        self.bridge = f"ncb{self.tag}"
        self.names = [f"nc{self.tag}h{i}" for i in range(1, n + 1)]
        self.made_bridge = False
        self.made: list[str] = []
        used = sh("ip", "-4", "-o", "addr", "show").stdout
        free = [x for x in range(20, 250) if f" 10.77.{x}." not in used]
        if not free:
            raise RuntimeError("no free 10.77.x.0/24 subnet")
        self.x = free[os.getpid() % len(free)]
        self.subnet = f"10.77.{self.x}.0/24"
        self.addrs = [f"10.77.{self.x}.{10 + i}" for i in range(1, n + 1)]

    def up(self) -> None:
        x = self.x
        sh("ip", "link", "add", self.bridge, "type", "bridge")
        self.made_bridge = True
        sh("ip", "addr", "add", f"10.77.{x}.1/24", "dev", self.bridge)
        sh("ip", "link", "set", self.bridge, "up")
        for name, addr in zip(self.names, self.addrs):
            sh("ip", "netns", "add", name)
            self.made.append(name)
            sh("ip", "link", "add", f"{name}v", "type", "veth", "peer", "name", "eth0", "netns",
               name)
            sh("ip", "link", "set", f"{name}v", "master", self.bridge, "up")
            sh("ip", "-n", name, "addr", "add", f"{addr}/24", "dev", "eth0")
            sh("ip", "-n", name, "link", "set", "eth0", "up")
            sh("ip", "-n", name, "link", "set", "lo", "up")
            sh("ip", "-n", name, "route", "add", "default", "via", f"10.77.{x}.1")

    def pids(self, name: str) -> list[int]:
        out = sh("ip", "netns", "pids", name, check=False).stdout
        return [int(p) for p in out.split()]

    def down(self) -> None:
        for name in self.made:
            for pid in self.pids(name):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            sh("ip", "netns", "del", name, check=False)
        if self.made_bridge:
            sh("ip", "link", "del", self.bridge, check=False)


def remove_stale() -> None:
    """Namespaces and bridges of instances that are no longer running (killed at a timeout)."""
    for line in sh("ip", "netns", "list", check=False).stdout.splitlines():
        m = re.match(r"nc(\d+)h\d+\b", line)
        if m and not Path(f"/proc/{m.group(1)}").exists():
            for pid in sh("ip", "netns", "pids", line.split()[0], check=False).stdout.split():
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
            sh("ip", "netns", "del", line.split()[0], check=False)
    for line in sh("ip", "-o", "link", "show", "type", "bridge", check=False).stdout.splitlines():
        m = re.search(r": ncb(\d+):", line)
        if m and not Path(f"/proc/{m.group(1)}").exists():
            sh("ip", "link", "del", f"ncb{m.group(1)}", check=False)


def can_make_namespaces() -> str:
    """"" when this process may make network namespaces, else why not."""
    if os.geteuid() != 0:
        return "not root: making network namespaces needs CAP_NET_ADMIN (CI runs as root)"
    for tool in ("ip", "tc", "mpirun", "unshare"):
        if not shutil.which(tool):
            return f"{tool} not found (Debian packages iproute2, openmpi-bin, util-linux)"
    probe = f"nc{os.getpid()}probe"
    r = sh("ip", "netns", "add", probe, check=False)
    if r.returncode != 0:
        return f"`ip netns add` is not permitted here: {r.stderr.strip()}"
    sh("ip", "netns", "del", probe, check=False)
    return ""


def job_processes(controller_pid: int) -> list[int]:
    """Live processes whose environment carries a NANCHAOS_JOB_ID of that controller (root /proc
    sees every PID namespace of this machine)."""
    marker = f"NANCHAOS_JOB_ID={controller_pid}-".encode()
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            env = (d / "environ").read_bytes()
            state = (d / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z" and any(e.startswith(marker) for e in env.split(b"\0")):
            found.append(int(d.name))
    return found


class Failures:
    def __init__(self) -> None:
        self.items: list[str] = []

    def check(self, ok: bool, what: str) -> None:
        print(("ok    " if ok else "FAIL  ") + what, flush=True)
        if not ok:
            self.items.append(what)


def first_event(run_dir: Path, rank: int) -> dict:
    with open(run_dir / "events" / f"rank-{rank}.jsonl") as f:
        return json.loads(f.readline())


def run_suite(nanchaos: str, hosts: Hosts, scenarios: list[str], out: Path) -> tuple[dict, int]:
    hostfile = out.parent / "hostfile"
    hostfile.write_text("".join(f"{a} slots=2\n" for a in hosts.addrs))
    launcher = (
        f"mpirun --hostfile {hostfile} --map-by node --mca plm_rsh_agent {HERE / 'nsrsh'} "
        f"--mca oob_tcp_if_include {hosts.subnet} --mca btl_tcp_if_include {hosts.subnet} "
        "--mca btl tcp,self"
    )
    cmd = [nanchaos, "run", *scenarios, "--launcher", launcher, "--out", str(out), "--quiet"]
    print("$ " + " ".join(cmd), flush=True)
    t = time.monotonic()
    proc = subprocess.Popen(cmd)
    rc = proc.wait()
    print(f"nanchaos run: exit {rc} after {time.monotonic() - t:.1f} s", flush=True)
    leftover = job_processes(proc.pid)
    report = json.loads((out / "report.json").read_text())
    report["_leftover"] = leftover
    return report, rc


def check_placement(f: Failures, hosts: Hosts, sc: dict) -> None:
    """Rank r runs on host r % 2 (--map-by node), in a PID namespace of its own."""
    run_dir = Path(sc["run_dir"])
    ours = os.readlink("/proc/self/ns/pid")
    for r in range(sc["ranks"]):
        e = first_event(run_dir, r)
        want = hosts.names[r % len(hosts.names)]
        f.check(e.get("host") == want and e.get("pidns") not in (None, ours),
                f"{sc['name']}: rank {r} ran on {e.get('host')} (want {want}), pid {e.get('pid')} "
                f"in {e.get('pidns')} (not ours, {ours})")
    f.check(sc.get("remote_ranks") == list(range(sc["ranks"])),
            f"{sc['name']}: remote_ranks {sc.get('remote_ranks')}: every rank, none pid-watched")


def check_clocks(f: Failures, sc: dict) -> None:
    """One machine: the true offset is 0, so NTP's estimate must lie within rtt/2 of it."""
    offsets = sc.get("clock_offsets") or {}
    for r in range(sc["ranks"]):
        c = offsets.get(str(r))
        if not c or "offset_us" not in c:
            f.check(False, f"{sc['name']}: rank {r} has no clock measurement: {c}")
            continue
        bound = c["rtt_us"] // 2 + 1
        shift = c.get("applied_shift_us")
        f.check(c["samples"] >= 1 and abs(c["offset_us"]) <= bound,
                f"{sc['name']}: rank {r} on {c['host']}: offset {c['offset_us']} us, rtt "
                f"{c['rtt_us']} us, {c['samples']} samples (|offset| <= rtt/2 + 1 = {bound})")
        # The shift adds the two hosts' realtime-monotonic readings: same kernel, same clock.
        f.check(shift is not None and abs(shift) <= bound + 100,
                f"{sc['name']}: rank {r}: applied shift {shift} us (|shift| <= {bound + 100})")


def phase_faults(nanchaos: str, hosts: Hosts, work: Path) -> Failures:
    f = Failures()
    names = ["nan-activation-rank1", "crash-rank1", "hang-forever-rank2"]
    files = [str(SOURCE / "scenarios" / f"{n}.toml") for n in names]
    report, rc = run_suite(nanchaos, hosts, files, work / "faults")
    f.check(rc == 0, f"nanchaos run exit status {rc} (0: every scenario passed)")
    by_name = {s["name"]: s for s in report["scenarios"]}
    for n in names:
        sc = by_name[n]
        f.check(sc["verdict"] == "pass", f"{n}: verdict {sc['verdict']} {sc.get('reason', '')}")
        check_placement(f, hosts, sc)
        check_clocks(f, sc)
    nan = by_name["nan-activation-rank1"]
    fd = nan.get("first_detection") or {}
    f.check(fd.get("detector") == "loss" and fd.get("rank") == 1 and nan["outcome"] == "completed",
            f"nan: first detection {fd.get('detector')} on rank {fd.get('rank')}, {nan['outcome']}")
    crash = by_name["crash-rank1"]
    pm = crash.get("postmortem") or {}
    f.check(pm.get("ranks") == [1] and pm.get("cause") == "rank_failure"
            and crash["dead_ranks"] == [1] and crash["outcome"] == "crashed",
            f"crash: post-mortem {pm}, dead_ranks {crash['dead_ranks']}, {crash['outcome']}")
    hang = by_name["hang-forever-rank2"]
    fd = hang.get("first_detection") or {}
    f.check(fd.get("detector") == "watchdog" and fd.get("rank") == 2
            and hang["outcome"] == "aborted" and hang["deadlock"] is False,
            f"hang: first detection {fd.get('detector')} on rank {fd.get('rank')}, "
            f"{hang['outcome']}, deadlock {hang['deadlock']}")
    for sc in (crash, hang):
        lat = sc.get("abort_latency_ms")
        f.check(lat is not None and 0 < lat <= 4000,
                f"{sc['name']}: abort latency across hosts {lat} ms (<= 4000)")
    for name in hosts.names:
        left = hosts.pids(name)
        f.check(not left, f"no process left on host {name}: {left}")
    f.check(not report["_leftover"], f"no NANCHAOS_JOB_ID process left: {report['_leftover']}")
    return f


def phase_slow_link(nanchaos: str, hosts: Hosts, work: Path) -> Failures:
    f = Failures()
    # 1 Mbit/s: a step of the scenario's model takes ~1 s (measured here: 0.76..1.3 s) instead
    # of a few ms, its collectives far under its collective_timeout_ms (10 s).
    for name in hosts.names:
        sh("ip", "netns", "exec", name, "tc", "qdisc", "add", "dev", "eth0", "root", "tbf",
           "rate", "1mbit", "burst", "4kb", "latency", "400ms")
    report, rc = run_suite(nanchaos, hosts, [str(HERE / "slow-link.toml")], work / "slow")
    sc = report["scenarios"][0]
    f.check(rc == 0 and sc["verdict"] == "pass", f"slow-link: exit {rc}, verdict {sc['verdict']} "
            f"{sc.get('reason', '')}")
    f.check(sc["outcome"] == "completed" and sc["deadlock"] is False and not sc.get("detections"),
            f"slow-link: outcome {sc['outcome']} (not hung), deadlock {sc['deadlock']}, "
            f"detections {sc.get('detections')}, longest collective wait "
            f"{sc.get('longest_collective_wait_ms')} ms")
    check_placement(f, hosts, sc)
    begin: dict[int, int] = {}
    steps_ms = []
    with open(Path(sc["run_dir"]) / "events" / "rank-0.jsonl") as log:
        for e in map(json.loads, log):
            if e["ev"] == "step_begin":
                begin[e["step"]] = e["t_us"]
            elif e["ev"] == "step_end" and e["step"] in begin:
                steps_ms.append((e["t_us"] - begin[e["step"]]) / 1000)
    if steps_ms:  # information, not a check: times depend on the machine
        print(f"slow-link: rank 0's step time {min(steps_ms):.1f}..{max(steps_ms):.1f} ms "
              f"(median {sorted(steps_ms)[len(steps_ms) // 2]:.1f} ms)", flush=True)
    for name in hosts.names:
        stats = sh("ip", "netns", "exec", name, "tc", "-s", "qdisc", "show", "dev", "eth0").stdout
        m = re.search(r"overlimits (\d+)", stats)
        over = int(m.group(1)) if m else 0
        f.check(over > 0, f"host {name}: the tbf shaper held packets back (overlimits {over})")
    for name in hosts.names:
        f.check(not hosts.pids(name), f"no process left on host {name}")
    return f


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nanchaos", required=True, help="the nanchaos binary")
    ap.add_argument("--phase", choices=["faults", "slow_link"], required=True)
    args = ap.parse_args()
    why = can_make_namespaces()
    if why:
        print(f"multinode: SKIPPED: {why}", flush=True)
        return SKIP
    remove_stale()
    # CTest's timeout sends SIGTERM first where it can; turn it into an exception so `finally`
    # tears the hosts down.
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda s, _f: sys.exit(128 + s))
    hosts = Hosts(2)
    work = Path(tempfile.mkdtemp(prefix=f"nanchaos-multinode-{args.phase}-"))
    t = time.monotonic()
    try:
        hosts.up()
        print(f"hosts {', '.join(f'{n} ({a})' for n, a in zip(hosts.names, hosts.addrs))} on "
              f"bridge {hosts.bridge}; run folder {work}", flush=True)
        phase = phase_faults if args.phase == "faults" else phase_slow_link
        f = phase(args.nanchaos, hosts, work)
    finally:
        hosts.down()
    print(f"multinode {args.phase}: {len(f.items)} failure(s), {time.monotonic() - t:.1f} s",
          flush=True)
    if f.items:
        print(f"run folder kept: {work}", flush=True)
        return 1
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
