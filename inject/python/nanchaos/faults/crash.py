"""Fault kind ``crash``: the rank dies abruptly at the start of the iteration: SIGKILL by default
(as the OOM killer or a lost node would), or ``os._exit(exit_code)`` (no atexit handlers, no
flush: a process that called _exit). Twin of inject/crash.cpp."""

from __future__ import annotations

import os
import signal

from .base import Fault, FaultContext, register


@register("crash")
class CrashFault(Fault):
    needs = frozenset({"step_start"})

    def on_step_start(self, ctx: FaultContext) -> None:
        if not self.armed(ctx):
            return
        code = self.spec.param("exit_code")
        ctx.fired(self.index, "process", {"how": "SIGKILL" if code is None else f"exit {code}"})
        if code is not None:
            os._exit(int(code))
        os.kill(os.getpid(), signal.SIGKILL)
