"""A tiny GPT trained the way popular open-source trainers do it (nanoGPT / HF-Trainer style loop).

What makes this loop harder for a harness than ``train_ddp.py``, on purpose:
  * an evaluation pass at iteration 0 and every ``--eval-interval`` iterations: several forwards
    under ``model.eval()`` and ``torch.no_grad()`` that are not training steps;
  * gradient accumulation: ``--grad-accum`` micro-batches per iteration, all but the last under
    ``model.no_sync()``, so DDP all-reduces the gradients once per iteration;
  * its own LR schedule (linear warmup, cosine decay), written into every
    ``optimizer.param_groups[i]["lr"]`` each iteration before the optimizer step;
  * ``clip_grad_norm_`` before the step; the loss is computed inside the model's forward.

Its stack: skip the optimizer step when this iteration's loss or gradient norm is non-finite on
any rank (one all-reduce MAX of two flags, so every rank agrees). Under nanchaos set
``[job] micro_batches`` to ``--grad-accum`` (one iteration = that many training forwards).

Launch (one process per rank, torchrun's environment)::

    python3 -m torch.distributed.run --nproc_per_node 2 train_trainer.py

Model module names (``named_modules()`` of the unwrapped model), for ``--n-layer 2``::

    transformer, transformer.wte, transformer.wpe, transformer.h, transformer.h.0,
    transformer.h.0.ln_1, transformer.h.0.attn, transformer.h.0.attn.c_attn,
    transformer.h.0.attn.c_proj, transformer.h.0.ln_2, transformer.h.0.mlp,
    transformer.h.0.mlp.c_fc, transformer.h.0.mlp.gelu, transformer.h.0.mlp.c_proj,
    transformer.h.1 (same children), transformer.ln_f, lm_head

Checked on torch 1.13 (gloo, CPU); written against APIs that torch 2.x keeps.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import sys
import time
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

from ddp_common import add_process_group_args, init_distributed, nanchaos, parameter_digest

# --------------------------------------------------------------------------------------- model


@dataclass
class GPTConfig:
    block_size: int = 16
    vocab_size: int = 32
    n_layer: int = 2
    n_head: int = 2
    n_embd: int = 32


class CausalSelfAttention(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        assert config.n_embd % config.n_head == 0
        self.n_head = config.n_head
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd)
        # Fused attention where torch has it (2.0+); the explicit masked softmax otherwise. The
        # causal mask is built per call rather than kept as a buffer: DDP broadcasts buffers, and
        # gloo on torch 1.13 cannot broadcast a bool tensor.
        self.fused = hasattr(F, "scaled_dot_product_attention")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.c_attn(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.n_head, c // self.n_head).transpose(1, 2) for z in (q, k, v))
        if self.fused:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            causal = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
            att = att.masked_fill(~causal, float("-inf"))
            y = F.softmax(att, dim=-1) @ v
        return self.c_proj(y.transpose(1, 2).contiguous().view(b, t, c))


class MLP(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(self.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd)
        self.mlp = MLP(config)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    """``idx [batch, time]`` token ids -> ``(logits [batch, time, vocab], loss or None)``.

    No weight tying between ``wte`` and ``lm_head``, so every parameter has exactly one name.
    """

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.config = config
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(config.vocab_size, config.n_embd),
            wpe=nn.Embedding(config.block_size, config.n_embd),
            h=nn.ModuleList(Block(config) for _ in range(config.n_layer)),
            ln_f=nn.LayerNorm(config.n_embd),
        ))
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.apply(self._init_weights)

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def forward(self, idx: torch.Tensor, targets: Optional[torch.Tensor] = None
                ) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
        _, t = idx.shape
        pos = torch.arange(t, device=idx.device)
        x = self.transformer.wte(idx) + self.transformer.wpe(pos)
        for block in self.transformer.h:
            x = block(x)
        logits = self.lm_head(self.transformer.ln_f(x))
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
        return logits, loss

    def configure_optimizer(self, lr: float, weight_decay: float) -> torch.optim.Optimizer:
        """AdamW with two groups: weight decay on matrices and embeddings, none on biases/norms."""
        params = [p for p in self.parameters() if p.requires_grad]
        groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
                  {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
        return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95))


# ---------------------------------------------------------------------------------------- data


class SyntheticTokens:
    """A token stream with learnable structure: ``next = table[prev]`` 90% of the time.

    The stream (``tokens`` ids, first 90% train, rest val) is the same on every rank, seeded by
    ``seed``; each rank samples its own random windows from it (seeded by ``seed`` and ``rank``),
    as nanoGPT's ``get_batch`` does. The eval windows are drawn from a generator reset at every
    eval, so every eval pass sees the same batches.
    """

    def __init__(self, vocab_size: int, block_size: int, seed: int, rank: int,
                 device: torch.device, tokens: int = 20_000) -> None:
        g = torch.Generator().manual_seed(seed)
        table = torch.randperm(vocab_size, generator=g)
        noise = torch.randint(vocab_size, (tokens,), generator=g)
        keep = torch.rand(tokens, generator=g) < 0.9
        stream = torch.empty(tokens, dtype=torch.long)
        stream[0] = 0
        for i in range(1, tokens):  # 20k scalar steps: a few ms, once
            stream[i] = table[stream[i - 1]] if keep[i] else noise[i]
        split = int(0.9 * tokens)
        self.splits = {"train": stream[:split], "val": stream[split:]}
        self.block_size = block_size
        self.device = device
        self.seed = seed
        self.train_gen = torch.Generator().manual_seed(seed * 1_000_003 + 1 + rank)

    def get_batch(self, split: str, batch_size: int,
                  gen: Optional[torch.Generator] = None) -> Tuple[torch.Tensor, torch.Tensor]:
        data = self.splits[split]
        ix = torch.randint(len(data) - self.block_size - 1, (batch_size,),
                           generator=gen or self.train_gen)
        x = torch.stack([data[i:i + self.block_size] for i in ix.tolist()])
        y = torch.stack([data[i + 1:i + 1 + self.block_size] for i in ix.tolist()])
        return x.to(self.device), y.to(self.device)

    def eval_generator(self) -> torch.Generator:
        return torch.Generator().manual_seed(self.seed * 1_000_003 + 999_983)


# ------------------------------------------------------------------------------------- helpers


def get_lr(it: int, lr: float, min_lr: float, warmup_iters: int, decay_iters: int) -> float:
    """Linear warmup over ``warmup_iters``, then cosine decay to ``min_lr`` at ``decay_iters``."""
    if it < warmup_iters:
        return lr * (it + 1) / (warmup_iters + 1)
    if it >= decay_iters:
        return min_lr
    ratio = (it - warmup_iters) / max(1, decay_iters - warmup_iters)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (lr - min_lr)


@torch.no_grad()
def estimate_loss(model: nn.Module, data: SyntheticTokens, batch_size: int,
                  eval_iters: int) -> Dict[str, float]:
    """Mean loss over ``eval_iters`` fixed batches per split, in eval mode (not training steps)."""
    out = {}
    model.eval()
    gen = data.eval_generator()
    for split in ("train", "val"):
        losses = [model(*data.get_batch(split, batch_size, gen))[1].item()
                  for _ in range(eval_iters)]
        out[split] = sum(losses) / len(losses)
    model.train()
    return out


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_process_group_args(p)
    p.add_argument("--max-iters", type=int, default=20)
    p.add_argument("--grad-accum", type=int, default=4, help="micro-batches per iteration")
    p.add_argument("--batch-size", type=int, default=8, help="per micro-batch and rank")
    p.add_argument("--lr", type=float, default=1e-2, help="peak learning rate")
    p.add_argument("--min-lr", type=float, default=1e-3)
    p.add_argument("--warmup-iters", type=int, default=4)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--grad-clip", type=float, default=1.0, help="0 disables clipping")
    p.add_argument("--eval-interval", type=int, default=10)
    p.add_argument("--eval-iters", type=int, default=4, help="forwards per split per eval")
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--n-layer", type=int, default=2)
    p.add_argument("--n-embd", type=int, default=32)
    p.add_argument("--print-digest", action="store_true",
                   help="print each rank's parameter digest at the end")
    return p.parse_args(argv)


def main(argv: Optional[List[str]] = None) -> int:
    args = parse_args(argv)
    rank, local_rank, device, _ = init_distributed(args)
    master = rank == 0

    torch.manual_seed(args.seed)
    config = GPTConfig(n_layer=args.n_layer, n_embd=args.n_embd)
    raw_model = GPT(config).to(device)
    model = DistributedDataParallel(
        raw_model, device_ids=[local_rank] if device.type == "cuda" else None)
    optimizer = raw_model.configure_optimizer(args.lr, args.weight_decay)
    data = SyntheticTokens(config.vocab_size, config.block_size, args.seed, rank, device)
    if master:
        n_params = sum(p.numel() for p in raw_model.parameters())
        print(f"train_trainer: {n_params} parameters, world_size={dist.get_world_size()}, "
              f"grad_accum={args.grad_accum}, max_iters={args.max_iters}, "
              f"torch={torch.__version__}", flush=True)

    X, Y = data.get_batch("train", args.batch_size)  # first batch, fetched ahead
    skipped = 0
    iter_num = 0
    t0 = time.perf_counter()
    while True:
        lr = get_lr(iter_num, args.lr, args.min_lr, args.warmup_iters, args.max_iters)
        for group in optimizer.param_groups:
            group["lr"] = lr

        if iter_num % args.eval_interval == 0 or iter_num == args.max_iters:
            losses = estimate_loss(model, data, args.batch_size, args.eval_iters)
            if master:
                print(f"eval iter {iter_num}: train loss {losses['train']:.4f}, "
                      f"val loss {losses['val']:.4f}", flush=True)
        if iter_num == args.max_iters:
            break

        iter_loss = torch.zeros((), device=device)
        for micro_step in range(args.grad_accum):
            # DDP all-reduces the gradients in the last micro-batch's backward only.
            last = micro_step == args.grad_accum - 1
            with contextlib.nullcontext() if last else model.no_sync():
                _, loss = model(X, Y)
                loss = loss / args.grad_accum
                loss.backward()
            iter_loss += loss.detach()
            X, Y = data.get_batch("train", args.batch_size)

        if args.grad_clip > 0:
            grad_norm = torch.nn.utils.clip_grad_norm_(raw_model.parameters(), args.grad_clip)
        else:
            grad_norm = torch.norm(torch.stack([p.grad.detach().norm() for p in
                                                raw_model.parameters() if p.grad is not None]))

        # The stack: this rank's loss and the (already reduced) gradient norm, agreed by all.
        loss_bad = not bool(torch.isfinite(iter_loss))
        norm_bad = not bool(torch.isfinite(grad_norm))
        flags = torch.tensor([float(loss_bad), float(norm_bad)], device=device)
        dist.all_reduce(flags, op=dist.ReduceOp.MAX)
        any_loss_bad, any_norm_bad = (v > 0 for v in flags.tolist())
        skip = any_loss_bad or any_norm_bad
        if skip:
            # The gradient norm is the same on every rank after DDP's all-reduce, so when no rank's
            # loss explains it, every rank reports it: none can tell where it came from.
            if loss_bad:
                nanchaos.report_detection("nonfinite_check", cause="loss_math")
            elif norm_bad and not any_loss_bad:
                nanchaos.report_detection("nonfinite_check", cause="gradient")
            nanchaos.report_decision("skip_step")
            skipped += 1
        else:
            optimizer.step()
        optimizer.zero_grad(set_to_none=True)

        if master:
            print(f"iter {iter_num}: loss {iter_loss.item():.4f}, grad norm "
                  f"{grad_norm.item():.3f}, lr {lr:.2e}{' (skipped)' if skip else ''}", flush=True)
        iter_num += 1

    if master:
        print(f"done: {args.max_iters} iterations ({skipped} skipped) in "
              f"{time.perf_counter() - t0:.2f} s", flush=True)
    if args.print_digest:
        print(f"digest rank {rank} {parameter_digest(raw_model)}", flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
