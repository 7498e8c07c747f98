"""A patch that runs right after a package's ``__init__`` has executed, without importing the
package first (importing ``torch.distributed.checkpoint`` or ``.pipelining`` at bootstrap would
cost every job, most of which never use them).

``patch_when_imported(names, patch)`` puts a finder at the front of ``sys.meta_path``: when one of
``names`` is imported, the finder asks the other finders for its spec (``PathFinder``), wraps the
loader's ``exec_module`` so that ``patch(name)`` runs once the package's ``__init__`` has run,
and hands the spec back; every other import passes through untouched. Raises nothing itself; an
exception from ``patch`` propagates out of the job's ``import`` statement.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from types import ModuleType
from typing import Callable, Iterable, Optional, Sequence


class _AfterImport(importlib.abc.MetaPathFinder):
    def __init__(self, names: Iterable[str], patch: Callable[[str], None]) -> None:
        self.names = frozenset(names)
        self.patch = patch

    def find_spec(self, name: str, path: Optional[Sequence[str]],
                  target: Optional[ModuleType] = None) -> Optional[importlib.machinery.ModuleSpec]:
        if name not in self.names:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        loader, patch = spec.loader, self.patch
        orig_exec = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            orig_exec(module)
            patch(name)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def patch_when_imported(names: Iterable[str], patch: Callable[[str], None]) -> None:
    """Runs ``patch(name)`` after each package of ``names`` is imported (see the module doc)."""
    sys.meta_path.insert(0, _AfterImport(names, patch))
