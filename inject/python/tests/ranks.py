"""Test helper: runs a script as N real ranks (gloo on CPU) with the harness's environment, the
way ``nanchaos exec-rank`` sets it (docs/external-jobs.md), and returns each rank's events."""

from __future__ import annotations

import json
import os
import random
import socket
import subprocess
import sys
from typing import Dict, List, Optional

AGENT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def free_port() -> int:
    """A port free on every address now, below the kernel's ephemeral range (whose ports the
    ranks' own outgoing connections take by themselves), as the harness picks MASTER_PORT."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range", encoding="ascii") as fh:
            low = int(fh.read().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    for _ in range(200):
        port = random.randint(20000, max(low, 21000) - 1)
        try:
            with socket.socket() as s:
                s.bind(("", port))
            return port
        except OSError:
            continue
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def read_events(path: str) -> List[dict]:
    out = []
    if not os.path.exists(path):
        return out
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            line = line.strip()
            if line:
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError:
                    pass
    return out


class Job:
    def __init__(self, tmp, codes, events, outputs):
        self.tmp, self.codes, self.events, self.outputs = tmp, codes, events, outputs

    def of(self, rank: int, ev: str) -> List[dict]:
        return [e for e in self.events[rank] if e["ev"] == ev]


def run_ranks(tmp_path, script: str, plan: Optional[dict], world: int = 2, args=(),
              timeout: float = 120, env: Optional[Dict[str, str]] = None) -> Job:
    """Writes ``script`` to tmp_path, runs ``world`` ranks of it, waits; plan None = no harness."""
    path = os.path.join(str(tmp_path), "job.py")
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(script)
    for r in range(world):
        stale = os.path.join(str(tmp_path), f"rank-{r}.jsonl")
        if os.path.exists(stale):
            os.remove(stale)
    port = free_port()
    procs = []
    for r in range(world):
        e = dict(os.environ)
        e.update({"RANK": str(r), "WORLD_SIZE": str(world), "LOCAL_RANK": str(r),
                  "LOCAL_WORLD_SIZE": str(world), "MASTER_ADDR": "127.0.0.1",
                  "MASTER_PORT": str(port), "OMP_NUM_THREADS": "1",
                  "PYTHONPATH": AGENT_DIR + os.pathsep + e.get("PYTHONPATH", "")})
        e.pop("NANCHAOS_AGENT_PID", None)
        if plan is not None:
            p = dict(plan)
            p.setdefault("world", world)
            e["NANCHAOS_PLAN"] = json.dumps(p)
            e["NANCHAOS_EVENTS"] = os.path.join(str(tmp_path), f"rank-{r}.jsonl")
        else:
            e.pop("NANCHAOS_EVENTS", None)
        if env:
            e.update(env)
        procs.append(subprocess.Popen([sys.executable, path, *args], env=e, cwd=str(tmp_path),
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    codes, outputs = [], []
    for p in procs:
        try:
            out, _ = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            out, _ = p.communicate()
        codes.append(p.returncode)
        outputs.append(out)
    events = [read_events(os.path.join(str(tmp_path), f"rank-{r}.jsonl")) for r in range(world)]
    return Job(tmp_path, codes, events, outputs)
