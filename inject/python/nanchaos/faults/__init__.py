"""The agent's fault kinds, one module each (the registry is ``base.KINDS``)."""

from . import (  # noqa: F401  (registration)
    batch, bitflip, checkpoint, comm, crash, hang, lr, overflow, slow, tensor)
from .base import KINDS, Fault, FaultRefused, match_target

__all__ = ["KINDS", "Fault", "FaultRefused", "match_target", "make_faults"]


def make_faults(plan):
    """Instantiates every planned fault; raises FaultRefused naming the first one that the agent
    cannot apply faithfully to any external job."""
    out = []
    for spec in plan.faults:
        cls = KINDS.get(spec.kind)
        if cls is None:
            raise FaultRefused(f"[[fault]] #{spec.index + 1}: kind {spec.kind!r} is not "
                               "implemented by the Python agent (it has: "
                               f"{', '.join(sorted(KINDS))})")
        fault = cls(spec)
        why = fault.refusal(plan.micro_batches)
        if why:
            raise FaultRefused(f"[[fault]] #{spec.index + 1} ({spec.kind}): {why}")
        out.append(fault)
    return out
