"""``torch.compile`` under the agent: attach through compiled wrappers, hooks that dynamo honours.

A job compiles its model in any of these ways, before or after the agent would attach:
``torch.compile(model)``, ``model.compile()``, ``torch.compile(DDP(model))`` (parameters named
``_orig_mod.module.…``), ``DDP(torch.compile(model))`` or ``torch.compile`` on submodules
(torchtitan compiles each block). What the agent needs, and how this module gets it:

* **The model is the user's module.** An ``OptimizedModule`` (torch 2.x
  ``torch._dynamo.eval_frame``) holds the real module as ``_orig_mod`` and shares its
  parameters; ``unwrap`` follows ``_orig_mod`` and DDP's ``module`` to it, so the step clock,
  names (``_orig_mod.`` stripped, attach_rules.py) and hooks live on the module whose
  ``forward`` dynamo traces.
* **Dynamo must run the agent's hooks, not trace them.** A module hook registered before the
  first compiled call is traced into the graph: the step clock's counters and event writes
  would become guards (a recompile every step until dynamo's cache limit, then silent eager
  fallback) or side effects replayed by dynamo. Once the job calls ``torch.compile`` every hook
  the agent holds on a module (``copy_safe.CopySafeHook``s) is re-registered in place around
  ``torch._dynamo.disable(fn)``: dynamo breaks the graph at the hook, runs it eagerly and
  compiles the rest, so a fault's edit of a module's output is what the next compiled part
  reads (the compiled output equals the eager run's injected output: test_compiled.py).
  Eager jobs keep plain hooks (a disabled function costs ~0.5 us more per call in eager
  code: 0.53 against 0.07 us, timeit, torch 2.15 on this project's 2-core VM).
* **A hook added after the first compiled call must not be ignored.** Dynamo skips guards on
  ``nn.Module`` hooks by default (``torch._dynamo.config.skip_nnmodule_hook_guards = True``,
  torch 2.x), so code compiled before the agent attached (an optimizer created after a warm-up
  forward, ``nanchaos.attach`` late) would run without the hooks, silently. At the job's first
  ``torch.compile`` call the agent sets it to ``False``: dynamo guards on the hook dicts and
  recompiles once when the agent adds or removes a hook (a handful of times at attach, never
  per step). Chosen over ``torch._dynamo.reset()``, which would discard every compiled function
  of the job and cannot safely run inside the compiled call that attaches.
* **``fullgraph=True`` forbids graph breaks**, so an ``activation:`` target inside a module
  compiled that way cannot run eagerly: it is refused at attach (``CompileWatch.refusal``), naming
  the module and the fix. The step clock on a root compiled with ``fullgraph=True`` still works:
  ``OptimizedModule`` runs ``_orig_mod``'s forward hooks outside its compiled frame.
* **Inductor needs a C++ compiler for CPU code.** Without one torch fails at the first compiled
  call deep in inductor (``InvalidCxxCompiler: No working C++ compiler found in
  torch._inductor.config.cpp.cxx: (None, 'g++')``); the agent checks at the ``torch.compile`` call
  with the inductor backend and fails the job there with the cause and the fixes
  (``compiler_missing``).

Not covered: a loss computed inside the compiled region (a compiled train step, a model that
returns its loss) goes through the agent's wrapped ``torch.nn.functional`` loss while dynamo
traces it, so its recording and ``loss`` faults there are not checked; ``torch._dynamo.optimize``
called directly is not seen (only ``torch.compile`` and ``nn.Module.compile``, which calls it).
FSDP2 models need nothing more (blocks compiled before ``fully_shard``, or the ``fully_shard``-ed
root compiled: test_compiled.py). Checked on torch 2.15 (CPU, gloo; inductor
with g++ 12.2, and ``aot_eager``).
"""

from __future__ import annotations

import functools
import os
import shutil
import weakref
from typing import Any, Dict, Iterable, Optional, cast

import torch

from .copy_safe import CopySafeHook

__all__ = ["CompileWatch", "unwrap", "compiler_missing", "patch"]

#: The hook dicts of ``nn.Module`` that the agent registers into (forward pre-hooks and hooks).
_HOOK_DICTS = ("_forward_pre_hooks", "_forward_hooks")


def unwrap(module: Any) -> Any:
    """The user's module under ``torch.compile``'s ``OptimizedModule`` (``_orig_mod``) and DDP's
    ``module``, in any nesting (``compile(DDP(m))``, ``DDP(compile(m))``); anything else as is."""
    for _ in range(8):
        inner = None
        if type(module).__name__ == "OptimizedModule":
            inner = getattr(module, "_orig_mod", None)
        elif type(module).__name__ in ("DistributedDataParallel", "DataParallel"):
            inner = getattr(module, "module", None)
        if not isinstance(inner, torch.nn.Module):
            return module
        module = inner
    return module


def compiler_missing(backend: Any) -> Optional[str]:
    """Why ``torch.compile(..., backend=backend)`` cannot build CPU code here, or None.

    Only inductor (the default backend) compiles C++; it tries each entry of
    ``torch._inductor.config.cpp.cxx`` (torch 2.x: ``(None, $CXX or "g++")``, None meaning "a gcc
    conda installs", which needs ``conda``). Reads the config without importing inductor's
    compiler modules; a compiler found on PATH (or an absolute path that exists) is enough."""
    if backend not in (None, "inductor"):
        return None
    try:
        from torch._inductor import config as ind_config

        cands = tuple(ind_config.cpp.cxx)
    except Exception:  # an inductor this module does not know: let torch speak
        return None
    names = []
    for c in cands:
        if c is None:
            if shutil.which(os.environ.get("CONDA_EXE", "conda")):
                return None
            continue
        names.append(str(c))
        if shutil.which(str(c)) or (os.path.isabs(str(c)) and os.path.exists(str(c))):
            return None
    return (f"torch.compile with the inductor backend needs a C++ compiler for CPU code and "
            f"none was found: torch._inductor.config.cpp.cxx = {cands!r}, "
            f"{', '.join(names) or 'no name'} not on PATH and no conda; install one "
            "(Debian: apt-get install g++) or set CXX to its path, or compile with "
            "backend=\"aot_eager\" (torch would fail at the first compiled call with "
            "InvalidCxxCompiler)")


def _disabled(hook: CopySafeHook) -> CopySafeHook:
    """``hook`` with its function under ``torch._dynamo.disable`` (once)."""
    fn = hook.func
    if getattr(fn, "_nanchaos_compile_safe", False):
        return hook
    import torch._dynamo as dynamo  # binds dynamo only (a bare import would make torch local)

    safe = dynamo.disable(fn)
    try:
        safe._nanchaos_compile_safe = True
    except AttributeError:  # a callable that takes no attributes: wrap it once more
        inner = safe

        def safe(*args, **kwargs):
            return inner(*args, **kwargs)

        cast(Any, safe)._nanchaos_compile_safe = True
    return CopySafeHook(safe, *hook.args, **hook.keywords)


class CompileWatch:
    """One per agent: whether the job called ``torch.compile``, and the agent's module hooks made
    compile-safe from then on (module docstring). Called on the training thread only."""

    def __init__(self, agent: Any) -> None:
        self._agent = weakref.ref(agent)
        self.seen = False
        self.backends: list = []
        self._fullgraph: list = []  # weakrefs: the user's modules compiled with fullgraph=True

    def refusal(self, fault: Any, model: torch.nn.Module) -> Optional[str]:
        """Why ``fault`` cannot be applied faithfully in ``model``'s compiled regions, or None:
        an ``activation:`` target on a module compiled with ``fullgraph=True`` (or inside one).
        The agent's hook there must break the graph to run eagerly, which fullgraph forbids:
        dynamo would fail the first compiled call (``Unsupported: Skip calling
        torch.compiler.disable()d function``), so the fault is refused at attach instead."""
        if getattr(fault, "where", None) != "activation":
            return None
        roots = [r() for r in self._fullgraph if r() is not None]
        if not roots:
            return None
        inside: Dict[int, torch.nn.Module] = {}
        for root in roots:
            for mod in root.modules():
                inside.setdefault(id(mod), root)
        from . import faults as faults_mod
        from .attach_rules import plain_modules

        for name, mod in plain_modules(model):
            root = inside.get(id(mod))
            if root is not None and faults_mod.match_target(fault.pattern, name):
                return (f"activation:{name} runs inside torch.compile(..., fullgraph=True) of "
                        f"{type(root).__name__}: the agent's hook must break the graph there to "
                        "run eagerly, which fullgraph forbids; compile that module without "
                        "fullgraph=True, or target a module outside it")
        return None

    def protect(self, modules: Iterable[torch.nn.Module]) -> None:
        """After the job's first ``torch.compile``: every agent hook on ``modules`` (and their
        submodules) is re-registered, in place and in order, under ``torch._dynamo.disable``.
        A no-op before it (eager jobs keep plain hooks)."""
        if not self.seen:
            return
        done = set()
        for root in modules:
            if not isinstance(root, torch.nn.Module):
                continue
            for mod in root.modules():
                if id(mod) in done:
                    continue
                done.add(id(mod))
                for attr in _HOOK_DICTS:
                    hooks = getattr(mod, attr, None)
                    if not hooks:
                        continue
                    for key, hook in list(hooks.items()):
                        if isinstance(hook, CopySafeHook):
                            hooks[key] = _disabled(hook)

    def on_compile(self, target: Any, backend: Any, fullgraph: bool = False) -> None:
        """The job called ``torch.compile(target, backend=backend)`` (``target`` a module, a
        function, a bound ``_call_impl`` from ``nn.Module.compile``, or None for the decorator
        form). Raises ``agent.AttachError`` (through the agent's ``_fail``, which also writes the
        ``attach_error`` event) when inductor has no C++ compiler."""
        agent = self._agent()
        if agent is None:
            return
        self.backends.append(backend if isinstance(backend, str) else
                             getattr(backend, "__name__", type(backend).__name__))
        why = compiler_missing(backend)
        if why:
            agent._fail(why)
        if not self.seen:
            self.seen = True
            import torch._dynamo as dynamo  # binds dynamo only: torch stays the module's

            dynamo.config.skip_nnmodule_hook_guards = False
            # The job's own probe() calls inside a compiled forward: run, not traced.
            agent.probe = dynamo.disable(agent.probe)
        mods = [m for m in (target, getattr(target, "__self__", None))
                if isinstance(m, torch.nn.Module)]
        if fullgraph:
            self._fullgraph += [weakref.ref(unwrap(m)) for m in mods]
            if agent.model is not None:  # compiled after the agent attached
                for f in agent.faults:
                    why = self.refusal(f, agent.model)
                    if why:
                        agent._fail(f"[[fault]] #{f.index + 1} ({f.kind}): {why}")
        for ref, _ in list(agent._candidate_hooks.values()):
            if ref() is not None:
                mods.append(ref())
        if agent.model is not None:
            mods.append(agent.model)
        self.protect(mods)


def patch(agent: Any) -> None:
    """Wraps ``torch.compile`` (torch >= 2.0; nothing on older torch) so that the agent hears of
    every call before dynamo sees the target; ``nn.Module.compile`` goes through it too."""
    orig = getattr(torch, "compile", None)
    if orig is None or getattr(orig, "_nanchaos_wrapped", False):
        return

    @functools.wraps(orig)
    def compile_(model=None, *args, **kwargs):
        agent.compiled.on_compile(model, kwargs.get("backend", "inductor"),
                                  bool(kwargs.get("fullgraph", False)))
        return orig(model, *args, **kwargs)

    cast(Any, compile_)._nanchaos_wrapped = True
    torch.compile = compile_
