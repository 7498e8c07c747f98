"""What both example jobs share: the ``nanchaos`` import, the process group, the digest.

``train_ddp.py`` and ``train_trainer.py`` import this sibling module (``python3 train_ddp.py``
puts the script's folder first on ``sys.path``, so it is found wherever they are run from).

* ``nanchaos``: the agent's package when the harness put it on ``PYTHONPATH``, else a no-op
  stand-in with the same four calls, so the scripts also run without the harness.
* ``add_process_group_args`` / ``init_distributed``: ``--device``, ``--backend`` and
  ``--pg-timeout-s`` (seconds), and the process group they describe, from torchrun's
  environment (RANK, LOCAL_RANK; WORLD_SIZE, MASTER_ADDR, MASTER_PORT are read by
  ``init_process_group``).
* ``parameter_digest``: what ``--print-digest`` prints.

Checked on torch 1.13 (gloo, CPU); written against APIs that torch 2.x keeps.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import os
from typing import Tuple

import torch
import torch.distributed as dist
import torch.nn as nn

try:  # the harness puts the agent on PYTHONPATH; without it every call is a no-op
    import nanchaos
except ImportError:
    nanchaos = None


class _NoAgent:
    """Stands in for ``nanchaos`` when the job runs without the harness."""

    @staticmethod
    def attach(model, optimizer=None, scaler=None) -> None:
        pass

    @staticmethod
    def report_detection(detector, *, layer=None, cause=None, step=None) -> None:
        pass

    @staticmethod
    def report_decision(action, *, step=None) -> None:
        pass

    @staticmethod
    def probe(name, tensor):
        return tensor


if nanchaos is None:
    nanchaos = _NoAgent()


def add_process_group_args(p: argparse.ArgumentParser) -> None:
    """``--device cpu|cuda``, ``--backend`` and ``--pg-timeout-s`` (default 10 s)."""
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--backend", default=None, help="process group backend (default: gloo on cpu, "
                   "nccl on cuda)")
    p.add_argument("--pg-timeout-s", type=float, default=10.0,
                   help="process group timeout: a collective whose peer stopped raises after this")


def init_distributed(args: argparse.Namespace) -> Tuple[int, int, torch.device, str]:
    """One intra-op thread unless ``OMP_NUM_THREADS`` says otherwise, this rank's device (GPU
    ``LOCAL_RANK`` on cuda) and the default process group. Returns ``(rank, local_rank, device,
    backend)``. Raises ``KeyError`` without ``RANK`` in the environment."""
    if "OMP_NUM_THREADS" not in os.environ:
        torch.set_num_threads(1)
    rank = int(os.environ["RANK"])
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if args.device == "cuda":
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
        # NCCL only honours the timeout with async error handling (on by default in torch 2.x).
        os.environ.setdefault("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1")
        os.environ.setdefault("NCCL_ASYNC_ERROR_HANDLING", "1")
    else:
        device = torch.device("cpu")
    backend = args.backend or ("nccl" if args.device == "cuda" else "gloo")
    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=args.pg_timeout_s))
    return rank, local_rank, device, backend


def parameter_digest(model: nn.Module) -> str:
    """blake2b over every parameter's bytes in ``named_parameters()`` order."""
    h = hashlib.blake2b(digest_size=16)
    for name, p in model.named_parameters():
        h.update(name.encode())
        h.update(p.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()
