"""The agent's diagnostics on stderr, leveled by ``NANCHAOS_LOG`` as the C++ side's
(``harness/common/log.h``): ``trace | debug | info | warn | error | off``, default ``warn``.

The controller passes ``NANCHAOS_LOG`` on to every rank, so one switch covers the harness and
the agent. Lines read ``nanchaos rank R: LEVEL: message``. An unknown value is reported once and
``warn`` is used. What the judge needs never goes through here: evidence is the event log
(events.py); these lines are for a person reading ``ranks/rank-N.err``.

Standard library ``logging`` under the logger name ``nanchaos``; a job that configures logging
itself keeps its own handlers (the agent adds one handler to its own logger only and does not
propagate to the root logger, so the job's log format and files are untouched).
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Optional

#: NANCHAOS_LOG value -> logging level (``trace`` is DEBUG - 5: the per-step detail).
LEVELS = {"trace": 5, "debug": logging.DEBUG, "info": logging.INFO, "warn": logging.WARNING,
          "error": logging.ERROR, "off": logging.CRITICAL + 10}
logging.addLevelName(5, "TRACE")

_logger: Optional[logging.Logger] = None


def level_of(value: Optional[str]) -> Optional[int]:
    """The logging level a ``NANCHAOS_LOG`` value names (case-insensitive; unset or empty:
    ``warn``), or None for an unknown value."""
    if value is None or not value.strip():
        return logging.WARNING
    return LEVELS.get(value.strip().lower())


def logger(rank: Optional[int] = None) -> logging.Logger:
    """The agent's logger, configured from ``NANCHAOS_LOG`` at the first call. ``rank`` (the
    process's rank, when known) goes into the prefix of every line."""
    global _logger
    if _logger is None:
        _logger = logging.getLogger("nanchaos")
        _logger.propagate = False
        handler = logging.StreamHandler(sys.stderr)
        who = "nanchaos" if rank is None else f"nanchaos rank {rank}"
        handler.setFormatter(logging.Formatter(who + ": %(levelname)s: %(message)s"))
        _logger.addHandler(handler)
        raw = os.environ.get("NANCHAOS_LOG")
        level = level_of(raw)
        _logger.setLevel(logging.WARNING if level is None else level)
        if level is None:
            _logger.warning("NANCHAOS_LOG=%s: unknown level (one of: %s); using warn", raw,
                            ", ".join(LEVELS))
    return _logger
