"""The external rank's own watch over the controller (Python side of harness/common/job_guard.h).

When the controller that launched the job is gone (SIGKILLed, OOM-killed), nobody would enforce
``[job].timeout_ms`` any more. A daemon thread of the agent's process therefore ends the process
(``os._exit(5)``, after one line on stderr) when, checked every 200 ms:

- the controller's process is gone: ``$NANCHAOS_CONTROLLER_PID`` no longer has the start time
  ``$NANCHAOS_CONTROLLER_START`` (field 22 of ``/proc/PID/stat``; a zombie counts as gone), on the
  controller's host (``$NANCHAOS_CONTROLLER_HOST``) only;
- the launcher is gone: the parent pid changed since the agent started (re-parented);
- the job's deadline passed: ``$NANCHAOS_DEADLINE_UNIX_MS`` (timeout_ms + 2 s after the launch,
  wall-clock ms since the epoch), which the controller, while alive, never lets a job reach.

Standard library only; a process without these variables (the agent's own tests, a job run by
hand) starts no thread.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
from typing import Optional

EXIT_CODE = 5  # harness/common/job_guard.h kJobGuardExit
POLL_S = 0.2

_started = False


def process_start_ticks(pid: int) -> Optional[int]:
    """Start time of ``pid`` in clock ticks since boot, or None when it is gone or a zombie."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            line = f.read().decode("utf-8", "replace")
    except OSError:
        return None
    fields = line[line.rfind(")") + 1:].split()
    if not fields or fields[0] in ("Z", "X") or len(fields) < 20:
        return None
    return int(fields[19])  # field 22 overall; fields[0] is field 3


def _pidns() -> str:
    """This process's PID namespace, e.g. "pid:[4026531836]" (as harness/common/rank_host.h)."""
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""


class Guard:
    """The state read once at start; ``reason()`` says why the process must end ("" if not)."""

    def __init__(self, environ=os.environ) -> None:
        self.controller_pid = 0
        self.controller_start = 0
        pid = environ.get("NANCHAOS_CONTROLLER_PID", "")
        host = environ.get("NANCHAOS_CONTROLLER_HOST", "")
        pidns = environ.get("NANCHAOS_CONTROLLER_PIDNS", "")
        start = environ.get("NANCHAOS_CONTROLLER_START", "")
        # The pid means something only on the controller's host in its PID namespace.
        if pid and start and host == socket.gethostname() and (not pidns or pidns == _pidns()):
            self.controller_pid = int(pid)
            self.controller_start = int(start)
        self.parent_pid = os.getppid()
        if self.parent_pid <= 1:
            self.parent_pid = 0
        self.deadline_unix_ms = int(environ.get("NANCHAOS_DEADLINE_UNIX_MS", "0") or 0)
        self.active = bool(pid or self.deadline_unix_ms)

    def reason(self, parent_pid: int, now_unix_ms: int) -> str:
        if self.controller_pid:
            if process_start_ticks(self.controller_pid) != self.controller_start:
                return f"the controller (pid {self.controller_pid}) is gone"
        if self.parent_pid and parent_pid != self.parent_pid:
            return f"the launcher (pid {self.parent_pid}) is gone"
        if self.deadline_unix_ms and now_unix_ms >= self.deadline_unix_ms:
            return ("the job's deadline passed (timeout_ms + 2000 ms) and the controller did not "
                    "end the job")
        return ""


def start(who: str) -> bool:
    """Starts the guard thread once; returns whether one runs. ``who`` prefixes its stderr
    line ("nanchaos rank 1")."""
    global _started
    g = Guard()
    if _started or not g.active:
        return False
    _started = True

    def loop() -> None:
        while True:
            time.sleep(POLL_S)
            why = g.reason(os.getppid(), time.time_ns() // 1_000_000)
            if not why:
                continue
            try:
                sys.stderr.write(f"{who}: {why}: ending this rank\n")
                sys.stderr.flush()
            finally:
                os._exit(EXIT_CODE)

    threading.Thread(target=loop, name="nanchaos-guard", daemon=True).start()
    return True
