"""The agent's evidence writer: one JSON object per line in ``$NANCHAOS_EVENTS``.

Same schema as the built-in ranks' log (``harness/evidence/events.h``): every event carries ``ev`` and
``t_us``, microseconds on CLOCK_MONOTONIC (the clock the controller and every rank of a host
share). Each line is handed to the kernel with one ``os.write`` on an ``O_APPEND`` descriptor, so
it survives SIGKILL of this process a moment later (the page cache keeps it). NaN and infinities,
which JSON cannot carry, are written as ``null`` (readers treat null as non-finite).

Thread-safety: ``write`` may be called from any thread (DDP's comm-hook futures complete on a
process-group worker thread); a lock keeps lines whole and in order.

Evidence that cannot be written is never lost silently (the rule of ``harness/evidence/events.h``): disk
blocks are reserved ahead of the writes with Linux's ``fallocate(FALLOC_FL_KEEP_SIZE)`` (256 KiB
at a time, the file's size unchanged), and the last ``RESERVE_BYTES`` of them are kept for the
log's own records. When the filesystem refuses the next block (ENOSPC, EDQUOT, EFBIG),
``log_error {path, errno, error, op}`` goes into the reserve, later events are counted as dropped
and ``close`` adds ``log_dropped {count}``. Where fallocate is not supported (EOPNOTSUPP), writes
go straight on and a failed one is counted the same way.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import json
import math
import os
import sys
import threading
import time
from typing import Any, Dict, Optional

BLOCK_BYTES = 256 << 10
"""Disk space reserved ahead of the writes at a time (as ``harness/evidence/events.cpp``'s kBlock)."""
RESERVE_BYTES = 4096
"""Reserved bytes kept for ``log_error`` and ``log_dropped`` (``EventLog::kReserveBytes``)."""
_FALLOC_FL_KEEP_SIZE = 1  # linux/falloc.h
_NO_ROOM = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


def _libc_fallocate() -> Optional[Any]:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        f = libc.fallocate
    except (OSError, AttributeError):
        return None
    f.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_longlong, ctypes.c_longlong]
    f.restype = ctypes.c_int
    return f


_fallocate = _libc_fallocate()


def now_us() -> int:
    """CLOCK_MONOTONIC in microseconds, as ``harness/evidence/events.h::now_us``."""
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


def _line(rec: Dict[str, Any]) -> bytes:
    return (json.dumps(rec, separators=(",", ":")) + "\n").encode()


class EventLog:
    """Appends events to one rank's log. A failed write is reported once on stderr and counted
    (``dropped``), never silently lost; the job itself is not disturbed."""

    def __init__(self, path: str, owner_pid: int) -> None:
        self.path = path
        self.owner_pid = owner_pid
        self.dropped = 0
        self.error = 0  # errno of the first failed reservation or write (0: none)
        self._full = False
        self._lock = threading.Lock()
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
        self._size = os.fstat(self._fd).st_size  # bytes written (the shim's `launch` line first)
        self._reserved = self._size  # end of the blocks reserved so far
        self._reserving = _fallocate is not None
        self._reserve(self._size + 1)

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
        self.write_line(line)

    def write_line(self, line: str) -> None:
        """Hot-path variant for the fixed-schema events written every iteration (step_begin,
        step_end, coll_enter, coll_leave): ``line`` is one complete JSON object, already
        formatted, carrying "ev" and "t_us" (json.dumps costs ~5x the formatting), or several
        joined by newlines, handed to the kernel in the same single write."""
        if self._fd < 0 or os.getpid() != self.owner_pid:
            return
        data = (line + "\n").encode()
        with self._lock:
            end = self._size + len(data)
            if self._full or (end + RESERVE_BYTES > self._reserved and self._reserving
                              and not self._reserve(end)):
                self.dropped += 1
                return
            self._put(data)

    def _reserve(self, need: int) -> bool:
        """Reserves blocks up to ``need`` + RESERVE_BYTES; False when the filesystem is full."""
        if not self._reserving or need + RESERVE_BYTES <= self._reserved:
            return True
        end = (need + RESERVE_BYTES + BLOCK_BYTES - 1) // BLOCK_BYTES * BLOCK_BYTES
        assert _fallocate is not None
        if _fallocate(self._fd, _FALLOC_FL_KEEP_SIZE, 0, end) == 0:
            self._reserved = end
            return True
        err = ctypes.get_errno()
        if err not in _NO_ROOM:
            self._reserving = False  # no preallocation here: plain writes from now on
            return True
        if self._reserved == self._size:  # not even a reserve: try RESERVE_BYTES alone
            if _fallocate(self._fd, _FALLOC_FL_KEEP_SIZE, 0, self._size + RESERVE_BYTES) == 0:
                self._reserved = self._size + RESERVE_BYTES
        self._lose(err, "fallocate")
        return False

    def _lose(self, err: int, op: str) -> None:
        """The first loss: said on stderr and, where the reserve allows, as ``log_error``."""
        if not self.error:
            self.error = err
            try:
                os.write(2, f"nanchaos agent: event log {self.path}: {op} failed: "
                         f"{os.strerror(err)}; later events are counted as dropped\n".encode())
            except OSError:
                pass
        if not self._full:
            self._full = True
            self._put(_line({"ev": "log_error", "t_us": now_us(), "path": self.path,
                              "errno": err, "error": os.strerror(err), "op": op}))

    def _put(self, data: bytes) -> bool:
        """One ``os.write`` of ``data`` (whole lines); a failure is counted and said once."""
        try:
            n = os.write(self._fd, data)
        except OSError as e:
            self.dropped += 1
            self._lose(e.errno or errno.EIO, "write")
            return False
        self._size += n
        if n != len(data):  # a torn line: readers skip it
            self.dropped += 1
            self._lose(errno.ENOSPC, "write")
            return False
        return True

    def close(self) -> None:
        """Adds ``log_dropped`` when events were lost, gives unused reserved blocks back (the
        file's size never included them) and closes the descriptor."""
        with self._lock:
            if self._fd < 0:
                return
            if self.dropped and os.getpid() == self.owner_pid:
                self._put(_line({"ev": "log_dropped", "t_us": now_us(), "count": self.dropped}))
            try:
                os.ftruncate(self._fd, os.fstat(self._fd).st_size)  # frees KEEP_SIZE blocks
            except OSError:
                pass
            os.close(self._fd)
            self._fd = -1
