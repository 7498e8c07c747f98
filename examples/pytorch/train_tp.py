"""Tensor-parallel training of a small Llama-style decoder, in the shape of a torchtitan loop.

A nanchaos example job for DTensor tensor parallelism: the decoder of ``train_fsdp2.py`` (same
module names) split over a 1-D ``DeviceMesh`` of every rank with ``parallelize_module``:
attention's ``wq``/``wk``/``wv`` and the MLP's ``w1``/``w3`` column-wise, ``wo`` and ``w2``
row-wise (their output reduce-scattered along the sequence), the norms sequence-parallel, the
embedding row-wise and the output projection column-wise (logits gathered, replicated), as
torchtitan's ``apply_tp`` does. Every rank sees the same batch (TP, no data parallelism). AdamW,
gradient clipping, and a choice of check stacks. nanchaos runs it unchanged, once per rank.

Launch (one process per rank, torchrun's environment)::

    python3 -m torch.distributed.run --nproc_per_node 2 train_tp.py --stack synced

``--stack`` (as in ``train_fsdp2.py``, whose stack classes this job reuses):
  none      no check: backward, clip, step.
  raise     a non-finite loss raises before backward.
  synced    before backward, each rank checks its loss and its local shards; one all-reduce
            (MAX) of the two flags; every rank skips when any flag is set. A rank with a
            non-finite shard reports ``cause="parameter"`` (``layer`` = the first such
            parameter); when no shard is bad, a non-finite loss reports ``cause="loss_math"``.
  gradnorm  torchtitan's idiom: ``clip_grad_norm_``'s total norm (a DTensor reduced over the
            mesh: the same value on every rank); a non-finite norm skips the update on every
            rank (``cause="gradient"``, reported by every rank).

Parameters (``named_parameters()``: ``parallelize_module`` keeps the names) are ``DTensor``s:
``Shard(0)`` for column-wise linears and the embedding (rows of the weight), ``Shard(1)`` for
row-wise linears (columns), ``Replicate()`` for the norms. ``p.to_local()`` is this rank's part.

Needs torch >= 2.4 (``torch.distributed.tensor.parallel`` with ``SequenceParallel`` and
``PrepareModuleInput``); checked on torch 2.15 (gloo, CPU).
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
from train_fsdp2 import STACKS, SyntheticTokens, Transformer, local_shard_digest

try:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput,
                                                   RowwiseParallel, SequenceParallel,
                                                   parallelize_module)
except ImportError:  # torch < 2.4: torch.distributed.tensor was torch.distributed._tensor
    parallelize_module = None


def parallelize(model: Transformer, mesh) -> None:
    """torchtitan's TP plan over the 1-D ``mesh``. The residual stream between blocks is
    sharded along the sequence (dim 1, plain local tensors); each block's attention and MLP
    gather it (``PrepareModuleInput``), compute on their column shards and reduce-scatter the
    row-wise output back along the sequence. Attention keeps ``heads / tp`` heads per rank.
    Raises ``ValueError`` when the head count or the sequence does not divide by the mesh."""
    tp = mesh.size()
    parallelize_module(model, mesh, {
        "tok_embeddings": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1)),
        "norm": SequenceParallel(),
        "output": ColwiseParallel(input_layouts=Shard(1), output_layouts=Replicate()),
    })
    for block in model.layers.values():
        if block.attention.heads % tp:
            raise ValueError(f"{block.attention.heads} heads do not split over {tp} ranks")
        block.attention.heads //= tp
        parallelize_module(block, mesh, {
            "attention_norm": SequenceParallel(),
            "attention": PrepareModuleInput(input_layouts=(Shard(1), None, None),
                                            desired_input_layouts=(Replicate(), None, None)),
            "attention.wq": ColwiseParallel(),
            "attention.wk": ColwiseParallel(),
            "attention.wv": ColwiseParallel(),
            "attention.wo": RowwiseParallel(output_layouts=Shard(1)),
            "ffn_norm": SequenceParallel(),
            "feed_forward": PrepareModuleInput(input_layouts=(Shard(1),),
                                               desired_input_layouts=(Replicate(),)),
            "feed_forward.w1": ColwiseParallel(),
            "feed_forward.w2": RowwiseParallel(output_layouts=Shard(1)),
            "feed_forward.w3": ColwiseParallel(),
        })


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--stack", choices=sorted(STACKS), default="none",
                   help="loss/gradient check stack (default: none)")
    add_process_group_args(p)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--batch-size", type=int, default=8, help="sequences (the same on every rank)")
    p.add_argument("--seq-len", type=int, default=32, help="divisible by the rank count")
    p.add_argument("--vocab", type=int, default=64)
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--ffn-hidden", type=int, default=128)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--max-norm", type=float, default=1.0, help="gradient clipping norm")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--log-every", type=int, default=5, help="loss line on rank 0 every N steps")
    p.add_argument("--print-digest", action="store_true",
                   help="print each rank's digest of its local shards at the end")
    return p.parse_args(argv)


def main(argv: Optional[List[str]] = None) -> int:
    args = parse_args(argv)
    if parallelize_module is None:
        sys.stderr.write(f"train_tp: tensor parallelism (torch.distributed.tensor.parallel) "
                         f"needs torch >= 2.4; this is torch {torch.__version__}\n")
        return 2
    rank, _, device, backend = init_distributed(args)
    world_size = dist.get_world_size()
    if args.seq_len % world_size:
        sys.stderr.write(f"train_tp: --seq-len {args.seq_len} does not split over "
                         f"{world_size} ranks\n")
        return 2
    mesh = init_device_mesh(device.type, (world_size,), mesh_dim_names=("tp",))

    torch.manual_seed(args.seed)  # the same initial (full) parameters on every rank
    model = Transformer(args.vocab, args.dim, args.layers, args.heads, args.ffn_hidden,
                        args.seq_len).to(device)
    parallelize(model, mesh)
    # foreach=True: AdamW's multi-tensor path over the DTensor parameters (torchtitan's default).
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.1,
                                  foreach=True)
    stack = STACKS[args.stack](model, optimizer, args.max_norm)
    # One data stream for the whole TP group: every rank computes on the same batch.
    batches = SyntheticTokens(args.vocab, args.seq_len, args.seed, 0).batches(args.batch_size)
    if rank == 0:
        print(f"train_tp: stack={args.stack} backend={backend} tp={world_size} "
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
