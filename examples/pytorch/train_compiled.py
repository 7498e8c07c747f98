"""Compiled DDP training of a small Llama-style feed-forward decoder, torchtitan-style loop.

A nanchaos example job for ``torch.compile``: RMSNorm + SwiGLU blocks, DDP over gloo (or NCCL),
AdamW, gradient clipping, and a choice of check stacks. nanchaos runs it unchanged, once per rank,
and injects into modules that run inside the compiled region.

Launch (one process per rank, torchrun's environment)::

    python3 -m torch.distributed.run --nproc_per_node 2 train_compiled.py --stack synced

``--compile`` (where the compiled region is):
  blocks    torchtitan's way: each block ``torch.compile``d on its own, then DDP(model).
  model     DDP(torch.compile(model)).
  ddp       torch.compile(DDP(model)) (parameters named ``_orig_mod.module.…``).
  none      eager, for comparison.
``--compile-backend``: ``inductor`` (default; on CPU it builds C++ kernels and needs g++),
``aot_eager`` or ``eager``.

``--stack``:
  none      no check: backward, clip, step.
  synced    before backward each rank checks its own loss; one all-reduce (MAX) of the flag, and
            every rank skips the step when any rank's loss is non-finite (the rank whose loss it
            was reports ``loss_check``, ``cause="loss_math"``).
  gradnorm  torchtitan's idiom: the total gradient norm from ``clip_grad_norm_`` (after DDP's
            all-reduce, the same on every rank); a non-finite norm skips the update on every
            rank, each reporting ``grad_norm``, ``cause="gradient"``.

Model names (``named_modules()`` of the model; the targets use them, wrappers stripped)::

    tok_embeddings, layers, layers.N, layers.N.ffn_norm, layers.N.feed_forward,
    layers.N.feed_forward.{w1,w2,w3}, norm, output          (N = 0 .. --layers - 1)

Shapes: tokens ``[batch, seq_len]`` int64, logits ``[batch, seq_len, vocab]`` float32.
Needs torch >= 2.4 (``torch.compile`` with DDP on gloo); checked on torch 2.15 (CPU).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from typing import Iterator, List, Optional, Tuple

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

from ddp_common import add_process_group_args, init_distributed, nanchaos, parameter_digest


class RMSNorm(nn.Module):
    """Root-mean-square norm over the last dimension, with a learned gain ``[dim]``."""

    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class FeedForward(nn.Module):
    """SwiGLU: ``w2(silu(w1 x) * w3 x)``; ``[.., dim] -> [.., dim]``."""

    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    """Pre-norm residual block: ``x + feed_forward(ffn_norm(x))``."""

    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.ffn_norm = RMSNorm(dim)
        self.feed_forward = FeedForward(dim, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.feed_forward(self.ffn_norm(x))


class Decoder(nn.Module):
    """Embedding, ``layers`` blocks (a ModuleDict keyed "0", "1", ..., torchtitan's layout, so a
    compiled block can replace its entry), final norm and output projection."""

    def __init__(self, vocab: int, dim: int, layers: int, hidden: int) -> None:
        super().__init__()
        self.tok_embeddings = nn.Embedding(vocab, dim)
        self.layers = nn.ModuleDict({str(i): Block(dim, hidden) for i in range(layers)})
        self.norm = RMSNorm(dim)
        self.output = nn.Linear(dim, vocab, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.tok_embeddings(tokens)
        for block in self.layers.values():
            h = block(h)
        return self.output(self.norm(h))


def build(args: argparse.Namespace, device: torch.device) -> Tuple[nn.Module, nn.Module]:
    """The model and what the loop calls, compiled as ``--compile`` says."""
    model = Decoder(args.vocab, args.dim, args.layers, args.ffn_hidden).to(device)
    compile_ = lambda m: torch.compile(m, backend=args.compile_backend)  # noqa: E731
    if args.compile == "blocks":
        for name, block in list(model.layers.items()):
            model.layers[name] = compile_(block)
        return model, DDP(model)
    if args.compile == "model":
        return model, DDP(compile_(model))
    if args.compile == "ddp":
        return model, compile_(DDP(model))
    return model, DDP(model)


class Stack:
    """No check: backward, clip, step. ``step`` returns whether the update ran."""

    detector = ""

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer, max_norm: float):
        self.model, self.optimizer, self.max_norm = model, optimizer, max_norm

    def clip(self) -> torch.Tensor:
        return torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.max_norm)

    def step(self, loss: torch.Tensor, step: int) -> bool:
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.clip()
        self.optimizer.step()
        return True


class SyncedLossCheck(Stack):
    detector = "loss_check"

    def step(self, loss: torch.Tensor, step: int) -> bool:
        bad = torch.tensor([0.0 if torch.isfinite(loss) else 1.0], device=loss.device)
        mine = bool(bad.item())
        dist.all_reduce(bad, op=dist.ReduceOp.MAX)
        if bad.item() > 0:
            if mine:
                nanchaos.report_detection(self.detector, cause="loss_math")
            nanchaos.report_decision("skip_step")
            return False
        return super().step(loss, step)


class GradNormSkip(Stack):
    detector = "grad_norm"

    def step(self, loss: torch.Tensor, step: int) -> bool:
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        norm = self.clip()
        if not torch.isfinite(norm):
            nanchaos.report_detection(self.detector, cause="gradient")
            nanchaos.report_decision("skip_step")
            self.optimizer.zero_grad(set_to_none=True)
            return False
        self.optimizer.step()
        return True


STACKS = {"none": Stack, "synced": SyncedLossCheck, "gradnorm": GradNormSkip}


class SyntheticTokens:
    """A fixed random bigram table; batches of ``[batch, seq_len]`` tokens walked from it, a
    different stream per rank (``seed``, ``rank``), labels the next tokens."""

    def __init__(self, vocab: int, seq_len: int, seed: int, rank: int) -> None:
        g = torch.Generator().manual_seed(seed)
        self.next_token = torch.randint(0, vocab, (vocab,), generator=g)
        self.vocab, self.seq_len = vocab, seq_len
        self.gen = torch.Generator().manual_seed(seed + 1000 * (rank + 1))

    def batches(self, batch_size: int) -> Iterator[Tuple[torch.Tensor, torch.Tensor]]:
        while True:
            seq = torch.empty(batch_size, self.seq_len + 1, dtype=torch.long)
            seq[:, 0] = torch.randint(0, self.vocab, (batch_size,), generator=self.gen)
            noise = torch.rand(batch_size, self.seq_len, generator=self.gen) < 0.1
            rand = torch.randint(0, self.vocab, (batch_size, self.seq_len), generator=self.gen)
            for t in range(self.seq_len):
                seq[:, t + 1] = torch.where(noise[:, t], rand[:, t], self.next_token[seq[:, t]])
            yield seq[:, :-1], seq[:, 1:]


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--stack", choices=sorted(STACKS), default="none")
    p.add_argument("--compile", choices=["blocks", "model", "ddp", "none"], default="blocks")
    p.add_argument("--compile-backend", default="inductor")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--batch-size", type=int, default=8, help="sequences per rank")
    p.add_argument("--seq-len", type=int, default=16)
    p.add_argument("--vocab", type=int, default=64)
    p.add_argument("--dim", type=int, default=32)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--ffn-hidden", type=int, default=64)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--max-norm", type=float, default=1.0, help="gradient clipping norm")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--log-every", type=int, default=5, help="loss line on rank 0 every N steps")
    p.add_argument("--print-digest", action="store_true",
                   help="print each rank's parameter digest at the end")
    add_process_group_args(p)
    return p.parse_args(argv)


def main(argv: Optional[List[str]] = None) -> int:
    args = parse_args(argv)
    if not hasattr(torch, "compile"):
        sys.stderr.write(f"train_compiled: torch.compile needs torch >= 2.0 (2.4 checked); this "
                         f"is torch {torch.__version__}\n")
        return 2
    rank, _, device, backend = init_distributed(args)
    torch.manual_seed(args.seed)  # the same initial parameters on every rank
    model, train_model = build(args, device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.1)
    stack = STACKS[args.stack](model, optimizer, args.max_norm)
    batches = SyntheticTokens(args.vocab, args.seq_len, args.seed, rank).batches(args.batch_size)
    if rank == 0:
        print(f"train_compiled: stack={args.stack} compile={args.compile} "
              f"({args.compile_backend}) backend={backend} world_size={dist.get_world_size()} "
              f"steps={args.steps} torch={torch.__version__}", flush=True)

    skipped = 0
    loss_value = math.nan
    t0 = time.perf_counter()
    train_model.train()
    for step in range(args.steps):
        tokens, labels = (t.to(device) for t in next(batches))
        logits = train_model(tokens)
        loss = F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(0, 1))
        loss_value = loss.item()
        if not stack.step(loss, step):
            skipped += 1
        if rank == 0 and (step % args.log_every == 0 or step == args.steps - 1):
            print(f"step {step:4d} | loss {loss_value:.4f} | skipped {skipped} | "
                  f"{time.perf_counter() - t0:.3f} s", flush=True)
    if rank == 0:
        print(f"done: {args.steps} steps ({skipped} skipped on rank 0) in "
              f"{time.perf_counter() - t0:.2f} s | last loss {loss_value:.4f}", flush=True)
    if args.print_digest:
        print(f"digest rank {rank} {parameter_digest(model)}", flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
