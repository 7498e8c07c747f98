"""Jobs that start their own ranks (``torch.multiprocessing.spawn`` / ``start_processes``): refused
at the call, with the reason and the fix.

nanchaos starts every rank itself (one process per rank, with torchrun's environment: ``RANK``,
``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``) and its
agent observes exactly those processes. A script that spawns its ranks from a launcher process
(``mp.spawn(train, nprocs=world)``, the pattern of many tutorials) would run its training in
children the agent does not follow (a child interpreter inherits the environment but never
becomes a rank's agent: ``_bootstrap`` lets only the first process speak for the rank), and the
run would end with the launcher process's agent never having seen a model. So the spawn call is
refused before any child starts: an ``attach_error`` event with the reason below (the verdict's
reason, docs/external-jobs.md "Scripts that start their own ranks") and ``AttachError`` raised
into the job.

Only a spawn before the agent attached to a model is refused: a rank that already trains and
then starts helper processes with ``torch.multiprocessing`` is not starting its own ranks.

Patched: ``torch.multiprocessing.spawn`` and ``torch.multiprocessing.start_processes`` (the
package's names and those of its ``torch.multiprocessing.spawn`` submodule, where ``spawn`` looks
``start_processes`` up); same signature on torch 1.13 and 2.x: ``(fn, args=(), nprocs=1,
join=True, daemon=False, start_method='spawn')``. A name imported before the agent started
(``from torch.multiprocessing import spawn`` in a module imported by ``sitecustomize``) is not
reached; the job's own imports run after the patch.
"""

from __future__ import annotations

import functools
import sys
from typing import Any

#: The fix, as the refusal states it.
HOW_TO_RUN = (
    "nanchaos starts every rank itself, one process per rank with torchrun's environment (RANK, "
    "WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT), and observes only those processes, never "
    "processes they spawn: call the rank function directly when RANK is set, as under torchrun "
    "(`if \"RANK\" in os.environ: train(int(os.environ[\"LOCAL_RANK\"]), ...) else: "
    "mp.spawn(train, ...)`), and give the number of processes as [job].ranks")


def refusal(api: str, nprocs: Any) -> str:
    """The reason a spawn of ``nprocs`` processes through ``api`` is refused."""
    return (f"this job starts its own ranks with {api}(nprocs={nprocs}); {HOW_TO_RUN} "
            "(docs/external-jobs.md, \"Scripts that start their own ranks\")")


def _nprocs(args: tuple, kwargs: dict) -> Any:
    # (fn, args, nprocs, ...): nprocs is the third positional parameter.
    return kwargs.get("nprocs", args[2] if len(args) > 2 else 1)


def patch(agent: Any) -> None:
    """Wraps ``torch.multiprocessing.spawn`` and ``start_processes`` so that a call before the
    agent attached to a model calls ``agent._fail`` (writes ``attach_error``, raises
    ``AttachError``) instead of starting processes. Idempotent."""
    import torch.multiprocessing as tmp

    sub = sys.modules.get("torch.multiprocessing.spawn")
    for name in ("spawn", "start_processes"):
        orig = getattr(tmp, name, None)
        if orig is None or getattr(orig, "_nanchaos_wrapped", False):
            continue
        api = f"torch.multiprocessing.{name}"

        def make(orig=orig, api=api):
            @functools.wraps(orig)
            def wrapper(*args, **kwargs):
                if not agent.attached:
                    agent._fail(refusal(api, _nprocs(args, kwargs)))
                return orig(*args, **kwargs)

            wrapper._nanchaos_wrapped = True
            return wrapper

        wrapped = make()
        setattr(tmp, name, wrapped)
        if sub is not None and getattr(sub, name, None) is orig:
            setattr(sub, name, wrapped)
