"""Hooks that stay with the object they were registered on: copies of the model get inert ones.

Jobs copy their model: ``copy.deepcopy(model)`` for an EMA (timm's ``ModelEmaV2``) or a
best-model snapshot, ``pickle`` / ``torch.save(model)`` of the whole module, a ``state_dict``
round trip. ``nn.Module`` keeps its hooks in its ``__dict__`` (``_forward_pre_hooks``,
``_forward_hooks``), and both ``copy.deepcopy`` and ``pickle`` copy that dict's values: a bound
method of the agent drags the agent in (its event log holds a lock: ``TypeError: cannot pickle
'_thread.lock' object``), a closure cannot be pickled at all (``Can't pickle local object``), and
a closure that ``deepcopy`` shares (functions are copied by reference) would run for the copy,
whose forwards would then count as steps or take the model's faults.

``CopySafeHook(fn)`` wraps a module hook so that

* ``copy.deepcopy`` gives the copy ``INERT`` instead of the hook (the original keeps its own);
* ``pickle`` (and ``torch.save``, which pickles) writes ``INERT`` too, as a reference to a
  builtin (``getattr(None, "__init__")``), so the pickle loads in an interpreter where nanchaos is
  not installed;
* calls stay cheap: it is a ``functools.partial`` (called in C, no added Python frame), which
  matters for the forward pre-hook the step clock runs on every forward of the model: measured
  ~70 ns more per call than the bare bound method (CPython 3.11, torch 2.15, timeit on this
  2-core VM), against milliseconds per iteration.

``INERT`` is ``None.__init__``: it takes any positional arguments and returns ``None``, which for
a forward (pre-)hook means "unchanged" (PyTorch replaces the output, or the inputs, only when a
hook returns something other than ``None``). Tensor hooks (``Tensor.register_hook``) are not
copied by PyTorch at all (``Parameter.__deepcopy__`` builds a new parameter from the data;
parameters pickle without hooks, "Don't serialize hooks" in torch/_utils.py); the class also sets
``__torch_unserializable__``, the marker ``torch.utils.hooks.warn_if_has_hooks`` reads, so pickling
a parameter that carries one warns about nothing. ``state_dict`` holds tensors only and is not
affected. Checked on torch 1.13 and 2.15 (inject/python/tests/test_copies.py).
"""

from __future__ import annotations

import functools

#: What a copy of the model holds where the original holds the agent's hook: returns None.
INERT = None.__init__  # type: ignore[misc]  # the bound slot wrapper of None itself


class CopySafeHook(functools.partial):
    """``CopySafeHook(fn, *args)`` calls ``fn(*args, *call_args)``; copies and pickles are
    ``INERT``. Use for every hook the agent registers on the job's modules or tensors."""

    __slots__ = ()
    __torch_unserializable__ = True

    def __deepcopy__(self, memo):
        return INERT

    def __reduce__(self):
        return (getattr, (None, "__init__"))
