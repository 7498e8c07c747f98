"""The agent's evidence writer: one JSON object per line in ``$NANCHAOS_EVENTS``.

Same schema as the built-in ranks' log (``harness/events.h``): every event carries ``ev`` and
``t_us``, microseconds on CLOCK_MONOTONIC (the clock the controller and every rank of a host
share). Each line is handed to the kernel with one ``os.write`` on an ``O_APPEND`` descriptor, so
it survives SIGKILL of this process a moment later (the page cache keeps it). NaN and infinities,
which JSON cannot carry, are written as ``null`` (readers treat null as non-finite).

Thread-safety: ``write`` may be called from any thread (DDP's comm-hook futures complete on a
process-group worker thread); a lock keeps lines whole and in order.
"""

from __future__ import annotations

import json
import math
import os
import threading
import time
from typing import Any, Dict


def now_us() -> int:
    """CLOCK_MONOTONIC in microseconds, as ``harness/events.h::now_us``."""
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000


def num(v: Any) -> str:
    """A number as JSON text for the pre-formatted lines: NaN, infinities and None are null."""
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "null"
    return repr(v)


def _finite(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, dict):
        return {k: _finite(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_finite(x) for x in v]
    return v


class EventLog:
    """Appends events to one rank's log. A failed write is reported once on stderr and counted
    (``dropped``), never silently lost; the job itself is not disturbed."""

    def __init__(self, path: str, owner_pid: int) -> None:
        self.path = path
        self.owner_pid = owner_pid
        self.dropped = 0
        self._lock = threading.Lock()
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)

    def write(self, ev: str, **fields: Any) -> None:
        """Writes ``{"ev": ev, "t_us": now, **fields}`` as one line. Only the process that
        attached writes: a forked DataLoader worker inherits the descriptor but stays silent."""
        if os.getpid() != self.owner_pid or self._fd < 0:
            return
        rec: Dict[str, Any] = {"ev": ev, "t_us": fields.pop("t_us", None) or now_us()}
        rec.update(fields)
        try:
            line = json.dumps(rec, allow_nan=False, separators=(",", ":"))
        except ValueError:
            line = json.dumps(_finite(rec), separators=(",", ":"))
        self._append(line)

    def write_line(self, line: str) -> None:
        """Hot-path variant for the fixed-schema events written every iteration (step_begin,
        step_end, coll_enter, coll_leave): ``line`` is one complete JSON object, already
        formatted, carrying "ev" and "t_us" (json.dumps costs ~5x the formatting)."""
        if os.getpid() != self.owner_pid or self._fd < 0:
            return
        self._append(line)

    def _append(self, line: str) -> None:
        data = (line + "\n").encode()
        with self._lock:
            try:
                os.write(self._fd, data)
            except OSError as e:
                self.dropped += 1
                if self.dropped == 1:
                    os.write(2, f"nanchaos agent: cannot write {self.path}: {e}\n".encode())

    def close(self) -> None:
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1
