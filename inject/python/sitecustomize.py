"""nanchaos bootstrap: attaches the agent to a Python job launched by ``nanchaos run``.

The harness puts this folder first on PYTHONPATH. Python imports ``sitecustomize`` at start-up,
so this file runs before the job's code; it installs the agent only when ``$NANCHAOS_EVENTS`` is
set (a process launched by the harness) and then chains the ``sitecustomize`` that would have run
without it (Debian ships one, a virtualenv may have another), so nothing the job relied on is lost.
"""


def _chain() -> None:
    import importlib.machinery
    import importlib.util
    import os
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None or os.path.abspath(spec.origin or "") == __file__:
        return
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)


def _install() -> None:
    import os

    if os.environ.get("NANCHAOS_EVENTS"):
        from nanchaos import _bootstrap

        _bootstrap.install()


try:
    _install()
finally:
    _chain()
