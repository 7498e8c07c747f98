"""2-D parallel training (FSDP2 x TP) of a small Llama-style decoder, in torchtitan's way.

A nanchaos example job for a 2-D device mesh: ``init_device_mesh(device, (dp, tp),
mesh_dim_names=("dp", "tp"))`` over every rank (4 ranks: ``dp = 2``, ``tp = 2``; global rank
``r`` sits at ``(dp, tp) = (r // tp, r % tp)``). The decoder of ``train_fsdp2.py`` (same module
names) is first split over the ``"tp"`` mesh with ``train_tp.py``'s plan (torchtitan's
``apply_tp``), then ``fully_shard`` over the ``"dp"`` mesh on every block and the root
(torchtitan's ``apply_fsdp``). Each ``dp`` coordinate reads its own data (the two ranks of a TP
group see the same batch). AdamW, gradient clipping, and a choice of check stacks, the ones of
``train_fsdp2.py``. nanchaos runs it unchanged, once per rank.

Launch (one process per rank, torchrun's environment)::

    python3 -m torch.distributed.run --nproc_per_node 4 train_2d.py --stack synced

``--stack`` (``train_fsdp2.py``'s stack classes):
  none      no check: backward, clip, step.
  synced    before backward, each rank checks its loss and its local shards; one all-reduce
            (MAX, over the world) of the two flags; every rank skips when any flag is set. A rank
            with a non-finite shard reports ``cause="parameter"`` (``layer`` = the first such
            parameter); when no shard is bad, a non-finite loss reports ``cause="loss_math"``.
  gradnorm  torchtitan's idiom: ``clip_grad_norm_``'s total norm (a DTensor reduced over both
            mesh dimensions: the same value on every rank); a non-finite norm skips the update on
            every rank (``cause="gradient"``, reported by every rank).

Parameters (``named_parameters()``: both wrappers keep the names) are ``DTensor``s on the 2-D
mesh, placements ``(dp, tp)``: FSDP shards dim 0 over ``dp`` on top of TP's layout
(``Shard(0)`` rows for column-wise linears and the embedding, ``Shard(1)`` columns for
row-wise linears, ``Replicate()`` for the norms, which are therefore sharded over ``dp`` and
replicated over ``tp``). ``p.to_local()`` is this rank's part.

Needs torch >= 2.4 (``fully_shard`` on a TP-parallelized module); checked on torch 2.15 (gloo,
CPU).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from typing import List, Optional

import torch
import torch.distributed as dist
import torch.nn.functional as F

from ddp_common import add_process_group_args, init_distributed
from train_fsdp2 import STACKS, SyntheticTokens, Transformer, fully_shard, local_shard_digest
from train_tp import parallelize, parallelize_module

try:
    from torch.distributed.device_mesh import init_device_mesh
except ImportError:  # torch < 2.2
    init_device_mesh = None


def shard_2d(model: Transformer, mesh) -> None:
    """torchtitan's order on the 2-D ``mesh`` (dims ``"dp"``, ``"tp"``): the TP plan of
    ``train_tp.parallelize`` over ``mesh["tp"]``, then ``fully_shard`` over ``mesh["dp"]`` on
    every block and then the root (``reshard_after_forward=True``). Raises ``ValueError`` when
    the head count does not split over the ``tp`` size."""
    parallelize(model, mesh["tp"])
    for block in model.layers.values():
        fully_shard(block, mesh=mesh["dp"], reshard_after_forward=True)
    fully_shard(model, mesh=mesh["dp"])


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--stack", choices=["none", "synced", "gradnorm"], default="none",
                   help="loss/gradient check stack (default: none)")
    add_process_group_args(p)
    p.add_argument("--tp", type=int, default=2, help="tensor-parallel degree (divides the world)")
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--batch-size", type=int, default=4, help="sequences per dp coordinate")
    p.add_argument("--seq-len", type=int, default=16, help="divisible by --tp")
    p.add_argument("--vocab", type=int, default=64)
    p.add_argument("--dim", type=int, default=32)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--ffn-hidden", type=int, default=64)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--max-norm", type=float, default=1.0, help="gradient clipping norm")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--log-every", type=int, default=4, help="loss line on rank 0 every N steps")
    p.add_argument("--print-digest", action="store_true",
                   help="print each rank's digest of its local shards at the end")
    return p.parse_args(argv)


def main(argv: Optional[List[str]] = None) -> int:
    args = parse_args(argv)
    if fully_shard is None or parallelize_module is None or init_device_mesh is None:
        sys.stderr.write(f"train_2d: FSDP2 x TP (fully_shard, torch.distributed.tensor.parallel) "
                         f"needs torch >= 2.4; this is torch {torch.__version__}\n")
        return 2
    rank, _, device, backend = init_distributed(args)
    world_size = dist.get_world_size()
    if world_size % args.tp or args.seq_len % args.tp:
        sys.stderr.write(f"train_2d: --tp {args.tp} divides neither the world ({world_size}) "
                         f"or --seq-len {args.seq_len}\n")
        return 2
    dp = world_size // args.tp
    mesh = init_device_mesh(device.type, (dp, args.tp), mesh_dim_names=("dp", "tp"))
    dp_rank = mesh["dp"].get_local_rank()

    torch.manual_seed(args.seed)  # the same initial (full) parameters on every rank
    model = Transformer(args.vocab, args.dim, args.layers, args.heads, args.ffn_hidden,
                        args.seq_len).to(device)
    shard_2d(model, mesh)
    # foreach=True: AdamW's multi-tensor path over the DTensor shards (torchtitan's default).
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.1,
                                  foreach=True)
    stack = STACKS[args.stack](model, optimizer, args.max_norm)
    # One data stream per dp coordinate: the ranks of a TP group compute on the same batch.
    batches = SyntheticTokens(args.vocab, args.seq_len, args.seed, dp_rank).batches(
        args.batch_size)
    if rank == 0:
        print(f"train_2d: stack={args.stack} backend={backend} dp={dp} tp={args.tp} "
              f"steps={args.steps} torch={torch.__version__}", flush=True)

    skipped = 0
    loss_value = math.nan
    t0 = time.perf_counter()
    model.train()
    for step in range(args.steps):
        tokens, labels = next(batches)
        logits = model(tokens.to(device))
        loss = F.cross_entropy(logits.flatten(0, 1).float(), labels.to(device).flatten(0, 1))
        loss_value = loss.item()
        if not stack.step(loss, step):
            skipped += 1
        if rank == 0 and (step % args.log_every == 0 or step == args.steps - 1):
            print(f"step {step:4d} | loss {loss_value:.4f} | skipped {skipped}", flush=True)
    elapsed = time.perf_counter() - t0

    if rank == 0:
        print(f"done: {args.steps} steps ({skipped} skipped on rank 0) in {elapsed:.2f} s | "
              f"last loss {loss_value:.4f}", flush=True)
    if args.print_digest:
        print(f"digest rank {rank} {local_shard_digest(model)}", flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
