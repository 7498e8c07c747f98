"""What the job's own stack did, read off the job: the agent's ``observed:*`` detections.

The agent never adds a check of its own (agent.py); what it reports besides the faults it fired
is what the training loop visibly did, in the event schema of ``harness/evidence/events.h``:

- ``observed:skip``: an iteration in which no parameter changed (``Tensor._version`` of every
  parameter unmoved: GradScaler's found_inf, an early ``continue``, a hand-written check);
- ``observed:scale_backoff``: the attached GradScaler's scale fell (PyTorch's dynamic loss
  scaling halves it on found_inf; ``scale`` and ``previous_scale`` are the floats it held);
- ``observed:exception``: the job raised out of its script (``message``: type and text, at most
  2000 characters).

``Observer`` is built from the event log alone: it holds no plan, no fault and no expectation
(the stack under test must not know what was injected, so the detection paths never read the
plan; the plan reaches only the injection modules, ``faults/``, through ``agent.py``).
``tests/test_observed.py`` checks that this module imports nothing that can reach the plan.

Thread-safety: called on the training thread (the exception from the interpreter's excepthook);
the event log is locked.
"""

from __future__ import annotations

from typing import Optional

from .events import EventLog


class Observer:
    """The observed:* detections of one rank. ``step`` is the iteration number (0-based)."""

    def __init__(self, log: EventLog) -> None:
        self.log = log
        self._last_scale: Optional[float] = None

    def will_report(self, updated: bool, scale: Optional[float]) -> bool:
        """Whether ``end_iteration`` with these arguments writes a detection."""
        return not updated or (scale is not None and self._last_scale is not None
                               and scale < self._last_scale)

    def end_iteration(self, step: int, updated: bool, scale: Optional[float]) -> None:
        """Iteration ``step`` ended; ``updated``: some parameter was written during it;
        ``scale``: the attached GradScaler's scale read at its end (None: no scaler)."""
        if not updated:
            self.log.write("detect", detector="observed:skip", step=step, layer="", cause="",
                           source="observed")
        if scale is not None:
            if self._last_scale is not None and scale < self._last_scale:
                self.log.write("detect", detector="observed:scale_backoff", step=step, layer="",
                               cause="", source="observed", scale=scale,
                               previous_scale=self._last_scale)
            self._last_scale = scale

    def exception(self, step: int, message: str) -> None:
        """The job raised ``message`` (already cut to 2000 characters) during iteration ``step``
        (-1 before the first: reported at step 0)."""
        self.log.write("detect", detector="observed:exception", step=max(step, 0), layer="",
                       cause="", source="observed", message=message)
