"""A fault's tensor target (``where:pattern``), parsed once: the twin of
``harness/scenario/target.h``. ``tests/data/target_vectors.json`` is the shared test vector (read
by ``tests/harness/target_test.cpp`` and ``tests/test_target.py``), so both agents read a target
the same way.

    parse_target("activation:layers.1")            -> Target("activation", "layers.1")
    parse_target("optimizer:head.weight.exp_avg")  -> .name "head.weight", .state "exp_avg"
    parse_target("loss")                           -> Target("loss", "")
    parse_target("activation:")                    -> ValueError (the loader's message)

Standard library only; pure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

#: Every where, in the order the loader lists them.
WHERES = ("activation", "parameter", "gradient", "optimizer", "loss")


@dataclass(frozen=True)
class Target:
    """``where``: one of WHERES; ``pattern``: the NAME after ``where:`` (may hold ``*``, which
    matches one path segment), ``""`` for the loss."""

    where: str
    pattern: str

    @property
    def text(self) -> str:
        """The text as written: ``activation:layers.1``, ``loss``."""
        return "loss" if self.where == "loss" else f"{self.where}:{self.pattern}"

    @property
    def name(self) -> str:
        """The module or parameter named: the pattern, or for an optimizer target the PARAM of
        PARAM.STATE (what precedes the last ``.``; ``""`` when there is none)."""
        if self.where != "optimizer":
            return self.pattern
        return self.pattern.rpartition(".")[0]

    @property
    def state(self) -> str:
        """For an optimizer target the STATE of PARAM.STATE (what follows the last ``.``, the
        whole pattern when there is none); ``""`` otherwise."""
        if self.where != "optimizer":
            return ""
        return self.pattern.rpartition(".")[2]


def target_forms(allowed: Sequence[str] = WHERES) -> str:
    """``activation:NAME or ... or optimizer:PARAM.STATE or "loss"``, as the loader lists them."""
    forms = []
    for where in allowed:
        if where == "loss":
            forms.append('"loss"')
        else:
            forms.append(where + (":PARAM.STATE" if where == "optimizer" else ":NAME"))
    return " or ".join(forms)


def target_error(text: str, allowed: Sequence[str] = WHERES) -> str:
    """The loader's message for a text ``parse_target`` refuses."""
    return f'"{text}" is not a valid target; expected {target_forms(allowed)}'


def parse_target(text: str, allowed: Sequence[str] = WHERES) -> Target:
    """``where:NAME`` (NAME non-empty, where one of ``allowed`` other than loss) or exactly
    ``loss`` (when allowed). Raises ValueError with ``target_error(text, allowed)`` otherwise."""
    if text == "loss":
        target = Target("loss", "")
    else:
        where, colon, pattern = text.partition(":")
        if not colon or not pattern or where == "loss" or where not in WHERES:
            raise ValueError(target_error(text, allowed))
        target = Target(where, pattern)
    if target.where not in allowed:
        raise ValueError(target_error(text, allowed))
    return target
