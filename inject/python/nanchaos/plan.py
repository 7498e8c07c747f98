"""The plan the controller compiled from a scenario (``RUN/plan.json``, docs/external-jobs.md).

The agent only parses JSON: every default is already filled in by the controller. ``Plan.load``
reads ``$NANCHAOS_PLAN`` (the JSON text itself) or, failing that, the file named by
``$NANCHAOS_PLAN_FILE``. Raises ``PlanError`` naming what is wrong.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Union

from . import rng


class PlanError(ValueError):
    """A plan the agent cannot use (malformed JSON, a missing field, a fault it cannot apply)."""


def special_float(v: Any) -> float:
    """A plan number: a JSON number, or the strings "nan", "inf", "-inf"."""
    if isinstance(v, str):
        s = v.strip().lower()
        if s in ("nan", "inf", "+inf", "-inf"):
            return float(s)
        raise PlanError(f"expected a number or nan/inf/-inf, got {v!r}")
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise PlanError(f"expected a number, got {v!r}")
    return float(v)


@dataclass
class FaultSpec:
    """One ``[[fault]]`` of the scenario, as compiled: common keys typed, kind keys in
    ``params``."""

    index: int
    kind: str
    ranks: Union[str, List[int]]
    step: int
    repeat: int  # -1 = forever
    probability: float
    persistent: bool
    params: Dict[str, Any]
    given: List[str] = field(default_factory=list)

    def in_window(self, step: int) -> bool:
        """``step`` lies in [step, step + repeat) (the probability is not applied)."""
        return step >= self.step and (self.repeat < 0 or step < self.step + self.repeat)

    def hits_rank(self, rank: int) -> bool:
        return self.ranks == "all" or rank in self.ranks

    def armed(self, seed: int, step: int, rank: int) -> bool:
        """True when the fault fires at (step, rank): in the window, on a hit rank, and the
        seeded probability draw (``rng.fires``) succeeds."""
        if not self.in_window(step) or not self.hits_rank(rank):
            return False
        return rng.fires(seed, self.index, step, rank, self.probability)

    def param(self, key: str, default: Any = None) -> Any:
        v = self.params.get(key)
        return default if v is None else v

    def is_given(self, key: str) -> bool:
        return key in self.given


@dataclass
class Plan:
    scenario: str = ""
    seed: int = 0
    steps: int = 0
    micro_batches: int = 1
    world: int = 1
    collective_timeout_ms: int = 10000
    dry_run: bool = False
    faults: List[FaultSpec] = field(default_factory=list)

    @staticmethod
    def from_json(text: str) -> "Plan":
        try:
            d = json.loads(text)
        except json.JSONDecodeError as e:
            raise PlanError(f"plan is not JSON: {e}") from None
        if not isinstance(d, dict):
            raise PlanError("plan must be a JSON object")
        try:
            plan = Plan(
                scenario=str(d.get("scenario", "")),
                seed=int(d.get("seed", 0)),
                steps=int(d["steps"]),
                micro_batches=int(d.get("micro_batches", 1)),
                world=int(d.get("world", 1)),
                collective_timeout_ms=int(d.get("collective_timeout_ms", 10000)),
                dry_run=bool(d.get("dry_run", False)),
            )
            for f in d.get("faults", []):
                ranks = f.get("ranks", [0])
                if ranks != "all":
                    ranks = [int(r) for r in (ranks if isinstance(ranks, list) else [ranks])]
                plan.faults.append(
                    FaultSpec(
                        index=int(f["index"]),
                        kind=str(f["kind"]),
                        ranks=ranks,
                        step=int(f["step"]),
                        repeat=int(f.get("repeat", 1)),
                        probability=float(f.get("probability", 1.0)),
                        persistent=bool(f.get("persistent", False)),
                        params=dict(f.get("params", {})),
                        given=list(f.get("given", [])),
                    )
                )
        except (KeyError, TypeError, ValueError) as e:
            raise PlanError(f"plan field missing or malformed: {e!r}") from None
        if plan.micro_batches < 1:
            raise PlanError(f"micro_batches must be >= 1, got {plan.micro_batches}")
        return plan

    @staticmethod
    def load(environ: Optional[Dict[str, str]] = None) -> "Plan":
        env = os.environ if environ is None else environ
        text = env.get("NANCHAOS_PLAN", "")
        if text.strip():
            return Plan.from_json(text)
        path = env.get("NANCHAOS_PLAN_FILE", "")
        if not path:
            raise PlanError("neither NANCHAOS_PLAN nor NANCHAOS_PLAN_FILE is set")
        try:
            with open(path, encoding="utf-8") as fh:
                return Plan.from_json(fh.read())
        except OSError as e:
            raise PlanError(f"cannot read plan {path}: {e.strerror}") from None


def fmt_value(v: float) -> str:
    """A value as the inject events show it ("nan", "inf", "1e+05")."""
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return f"{v:g}"
