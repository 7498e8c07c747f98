"""nanoGPT-style configuration: module-level globals overridden from the command line.

``apply(namespace, argv)`` walks ``argv`` in order:
  * ``--key=value`` sets ``namespace[key]``; ``key`` must already exist there, and ``value``
    is read as a Python literal (``--compile=False``, ``--learning_rate=3e-4``) with a fall back
    to the plain string (``--device=cpu``). The new value must have the old one's type (an int
    is accepted where a float was, and becomes a float);
  * a bare argument is a config file: Python assignments run in a scratch namespace, whose
    names must all exist in ``namespace`` already (same type rule).
Anything else is an error naming the argument. The script calls it after defining its globals
and before reading any of them.
"""

from __future__ import annotations

import ast
from typing import Any, Dict, Iterable


def _coerce(key: str, old: Any, new: Any) -> Any:
    if isinstance(old, bool) or isinstance(new, bool):
        if type(old) is not type(new):
            raise SystemExit(f"config: {key} must be {type(old).__name__}, got {new!r}")
        return new
    if isinstance(old, float) and isinstance(new, int):
        return float(new)
    if type(old) is not type(new):
        raise SystemExit(f"config: {key} must be {type(old).__name__}, got {new!r}")
    return new


def apply(namespace: Dict[str, Any], argv: Iterable[str]) -> Dict[str, Any]:
    """Apply ``argv`` to ``namespace`` in place; returns the keys that changed and their values."""
    changed: Dict[str, Any] = {}
    for arg in argv:
        if not arg.startswith("--"):
            scratch: Dict[str, Any] = {}
            with open(arg) as f:
                exec(compile(f.read(), arg, "exec"), {}, scratch)
            for key, value in scratch.items():
                if key.startswith("_"):
                    continue
                if key not in namespace:
                    raise SystemExit(f"config: {arg} sets unknown key {key!r}")
                namespace[key] = changed[key] = _coerce(key, namespace[key], value)
            continue
        key, sep, text = arg[2:].partition("=")
        if not sep:
            raise SystemExit(f"config: expected --key=value, got {arg!r}")
        if key not in namespace or key.startswith("_"):
            raise SystemExit(f"config: unknown key {key!r} in {arg!r}")
        try:
            value = ast.literal_eval(text)
        except (SyntaxError, ValueError):
            value = text
        namespace[key] = changed[key] = _coerce(key, namespace[key], value)
    return changed
