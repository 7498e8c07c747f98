"""Each rank's own time per phase of an iteration, for the ``straggler`` detector and the reports.

SCENARIO_FORMAT.md "Slow ranks and finite silent data corruption": for external jobs the agent
records the same per-rank phase times as the built-in jobs, on the ``step_end`` event it already
writes (the field format is shared with the built-in jobs' writer and the C++ judge)::

    "own_us": {"data": D, "compute": C, "backward": B, "comm": M}, "wait_us": W, "run_delay_us": R

all integers, microseconds, of iteration ``step``:

- ``data``: from the end of the previous optimizer step (or the previous micro-batch's backward)
  to the iteration's training forward, after the agent's batch faults: the job's batch fetch;
- ``compute``: the forward and the loss, up to ``backward()``;
- ``backward``: ``backward()`` (under DDP, the bucket all-reduces launched inside it run in the
  background; only the time the rank then waited for them is waiting, below);
- ``comm``: after ``backward()`` up to the optimizer step (gradient clipping, the job's own
  consensus collectives), plus the time the rank spent inside the gradient collective's hooks
  before entering it (DDP's communication hook, the point before FSDP2's reduce-scatter), which
  runs inside ``backward()`` and is moved out of it.

The optimizer step itself belongs to no phase. Each phase is its wall time minus:

- ``wait_us``: time spent waiting in collectives (waiting for a slow peer is not being slow):
  every blocking ``torch.distributed`` call the agent wraps (collectives.py: their duration,
  e.g. FSDP2's all-gathers and reduce-scatters, the job's own all-reduces), and, for a DDP
  backward that all-reduces, the time from the end of the local gradient computation (an
  autograd final callback queued when the backward starts, so it runs before DDP's own, which
  waits for the buckets) to ``backward()`` returning. The DDP bucket all-reduces overlap the
  backward; only this tail is time the training thread actually waited.
- ``run_delay_us``: time the training thread sat runnable on a run queue
  (``/proc/thread-self/schedstat``, second field, ns; Linux with schedstats): a rank the host's
  scheduler kept off the CPU is not a slow rank. Read once an iteration, it is taken from the
  phases in proportion to their own time (assumed spread evenly over the time the thread ran).
  The field is omitted where unknown.

What is left is the rank's own work, including its own sleeps and blocking reads (a slow data
loader, a throttled device, a ``slow`` fault). Caveats: an ``async_op=True`` collective the job
waits on later, a functional collective (DTensor) and DDP's buffer broadcast at the forward are
not seen as waiting; their wait counts in the phase it falls in. Pipeline-parallel jobs
(pipeline.py) write no ``own_us``: their iteration interleaves micro-batches of every phase.

Cost: per iteration five boundaries (a clock read and a few additions each), one ``pread`` of
the schedstat file (~2 us on this project's VM) and the formatting in ``fields``, one tensor hook
and one autograd callback for a DDP backward. Thread-safety: ``mark``, ``restart`` and
``fields`` are called on the training thread; ``wait_ns`` and ``hook_ns`` are added to from the
thread that blocks (the training thread, or an autograd thread on GPU), under the GIL.
"""

from __future__ import annotations

import os
import threading
import time

DATA, COMPUTE, BACKWARD, COMM = 0, 1, 2, 3
"""Phase indices (the ``slow`` fault's ``where`` words, in ``own_us``' order)."""
OPTIMIZER = 4
"""The optimizer step's interval: timed, in no phase."""

_clock_ns = time.clock_gettime_ns
_MONOTONIC = time.CLOCK_MONOTONIC
_pread = os.pread


def now_ns() -> int:
    """CLOCK_MONOTONIC in ns (the event log's clock, events.now_us)."""
    return _clock_ns(_MONOTONIC)


def _open_schedstat() -> int:
    """An fd of the calling thread's schedstat file, or -1 where there is none."""
    try:
        return os.open(f"/proc/self/task/{threading.get_native_id()}/schedstat",
                       os.O_RDONLY | os.O_CLOEXEC)
    except (OSError, AttributeError):
        return -1


class PhaseClock:
    """Adds each interval between two phase boundaries to its phase as it ends (``mark``: a clock
    read and a subtraction) and formats the iteration's totals once, in ``fields`` (which also
    reads the run-queue delay, once per iteration). Created on the training thread (its run
    queue is read)."""

    def __init__(self) -> None:
        self.wait_ns = 0  # total time waiting in collectives (monotonic counter)
        self.hook_ns = 0  # total time in gradient-collective hooks before entering them
        self._fd = _open_schedstat()
        # own time (ns) per phase of the iteration so far; the last slot is the optimizer step's
        self._own = [0, 0, 0, 0, 0]
        self._prev = 0  # t - wait - hook at the last boundary
        self._wait0 = self._hook0 = 0  # the counters at the last ``fields`` (or ``restart``)
        self._delay0 = 0  # the run-queue delay at the last ``fields`` (or ``restart``)
        self._delay_t0 = 0  # when it was read
        self.restart()

    def _run_delay(self) -> int:
        """The training thread's run-queue delay so far (ns; 0 where unknown, and then the file
        is not read again)."""
        if self._fd < 0:
            return 0
        try:
            return int(_pread(self._fd, 96, 0).split()[1])
        except (OSError, IndexError, ValueError):
            os.close(self._fd)
            self._fd = -1
            return 0

    def restart(self) -> None:
        """Forgets the time so far: the next interval starts now (the job's start-up before its
        first iteration is no phase)."""
        self._own = [0, 0, 0, 0, 0]
        w, h = self.wait_ns, self.hook_ns
        self._wait0, self._hook0 = w, h
        self._delay0 = self._run_delay()
        self._delay_t0 = now = _clock_ns(_MONOTONIC)
        self._prev = now - w - h

    def mark(self, phase: int) -> None:
        """Ends the interval since the last boundary: its wall time, less what it spent waiting
        in collectives and in gradient-collective hooks, goes to ``phase`` (``OPTIMIZER``: the
        optimizer step, no phase); the hook time goes to ``comm`` in ``fields``. Runs five times
        an iteration: a clock read and a few additions."""
        o = _clock_ns(_MONOTONIC) - self.wait_ns - self.hook_ns
        x = o - self._prev
        if x > 0:
            self._own[phase] += x
        self._prev = o

    def fields(self) -> str:
        """``,"own_us":{...},"wait_us":W[,"run_delay_us":R]`` of the iteration's intervals
        (text to splice into the ``step_end`` line), and starts the next iteration's.

        ``wait_us`` counts the waits up to now: a collective the job calls after its optimizer
        step (a loss all-reduce for logging) counts in this iteration's ``wait_us``, while its
        time is taken out of the next iteration's ``data`` interval, where it falls.

        The run-queue delay is read here, once an iteration (a ``pread`` of the schedstat file,
        ~2 us): the delay since the last read is taken from every phase in proportion to its own
        time (a thread kept off the CPU is assumed kept off evenly over the time it ran; exact
        per phase would cost a read at every boundary)."""
        own = self._own
        w, h = self.wait_ns, self.hook_ns
        wait = w - self._wait0
        hook = h - self._hook0
        self._wait0, self._hook0 = w, h
        self._own = [0, 0, 0, 0, 0]
        delay_text = ""
        if self._fd >= 0:
            d = self._run_delay()
            now = _clock_ns(_MONOTONIC)
            delay = d - self._delay0
            running = now - self._delay_t0 - wait
            self._delay0, self._delay_t0 = d, now
            if delay > 0 and running > 0:
                keep = max(0.0, 1.0 - delay / running)
                own = [int(v * keep) for v in own]
            delay_text = f',"run_delay_us":{delay // 1000}'
        return (f',"own_us":{{"data":{own[0] // 1000},"compute":{own[1] // 1000},'
                f'"backward":{own[2] // 1000},"comm":{(own[3] + hook) // 1000}}},'
                f'"wait_us":{wait // 1000}{delay_text}')
