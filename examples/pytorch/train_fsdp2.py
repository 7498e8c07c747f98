"""FSDP2 training of a small Llama-style decoder, in the shape of a torchtitan training loop.

A nanchaos example job for sharded data parallelism: ``fully_shard`` on every transformer block,
then on the root, AdamW, gradient clipping, and a choice of loss/gradient check stacks. nanchaos
runs it unchanged, once per rank, injects faults into the ranks' local shards and judges what the
chosen ``--stack`` did.

Launch (one process per rank, torchrun's environment)::

    python3 -m torch.distributed.run --nproc_per_node 2 train_fsdp2.py --stack synced

``--stack``:
  none      no check: backward, clip, step.
  raise     a non-finite local loss raises before backward (that rank dies; its peers wait in
            FSDP's next all-gather until ``--pg-timeout-s``).
  synced    before backward, each rank checks what it owns: its loss and its local shards; one
            all-reduce (MAX) of the two flags, and every rank skips the step when any rank's
            flag is set. A rank with a non-finite shard reports ``cause="parameter"`` (``layer``
            = the first such parameter); when no shard is bad, a rank whose loss was non-finite
            reports ``cause="loss_math"``.
  gradnorm  torchtitan's idiom: the total gradient norm from ``clip_grad_norm_`` (a DTensor
            reduced over the mesh, the same on every rank); a non-finite norm skips the update on
            every rank (``cause="gradient"``, reported by every rank: none can tell whose shard
            it came from).

Model names (``named_modules()`` of the model; ``fully_shard`` keeps them, the targets use
them)::

    tok_embeddings, layers, layers.N, layers.N.attention_norm, layers.N.attention,
    layers.N.attention.{wq,wk,wv,wo}, layers.N.ffn_norm, layers.N.feed_forward,
    layers.N.feed_forward.{w1,w2,w3}, norm, output          (N = 0 .. --layers - 1)

``--compile blocks`` compiles each block before ``fully_shard`` (torchtitan's ``apply_compile``),
``--compile model`` the sharded model; ``--compile-backend`` (``inductor`` by default, which needs
g++ on CPU, or ``aot_eager``).

Parameters are ``DTensor``s sharded on dim 0 (``Shard(0)``) over the world's 1-D mesh: each
rank holds a contiguous chunk of rows of every parameter (``p.to_local()``).

Needs torch >= 2.4 (``fully_shard``: ``torch.distributed.fsdp`` from 2.6,
``torch.distributed._composable.fsdp`` before); checked on torch 2.15 (gloo, CPU).
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

from ddp_common import add_process_group_args, init_distributed, nanchaos

try:
    from torch.distributed.fsdp import fully_shard
except ImportError:  # torch < 2.6: FSDP2 lived under _composable (2.4, 2.5) or not at all
    try:
        from torch.distributed._composable.fsdp import fully_shard
    except ImportError:
        fully_shard = None


# --------------------------------------------------------------------------------------- model


class RMSNorm(nn.Module):
    """``x / rms(x) * weight`` over the last dimension (Llama's pre-norm)."""

    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        scale = torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return (x32 * scale).type_as(x) * self.weight


def rotary_tables(head_dim: int, seq_len: int, theta: float = 10000.0) -> Tuple[torch.Tensor,
                                                                                   torch.Tensor]:
    """cos and sin ``[seq_len, head_dim / 2]`` of the rotary position embedding."""
    inv = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
    angles = torch.outer(torch.arange(seq_len, dtype=torch.float32), inv)
    return angles.cos(), angles.sin()


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotates pairs ``(x[..., 2i], x[..., 2i+1])`` of ``x`` ``[batch, heads, seq, head_dim]``."""
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1).flatten(-2)


class Attention(nn.Module):
    """Causal multi-head self-attention with rotary positions, no bias (Llama's)."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.head_dim = dim // heads
        self.wq = nn.Linear(dim, dim, bias=False)
        self.wk = nn.Linear(dim, dim, bias=False)
        self.wv = nn.Linear(dim, dim, bias=False)
        self.wo = nn.Linear(dim, dim, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape

        def heads(t: torch.Tensor) -> torch.Tensor:
            return t.view(b, s, self.heads, self.head_dim).transpose(1, 2)

        q = apply_rotary(heads(self.wq(x)), cos, sin)
        k = apply_rotary(heads(self.wk(x)), cos, sin)
        out = F.scaled_dot_product_attention(q, k, heads(self.wv(x)), is_causal=True)
        return self.wo(out.transpose(1, 2).reshape(b, s, -1))


class FeedForward(nn.Module):
    """SwiGLU: ``w2(silu(w1(x)) * w3(x))``."""

    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class TransformerBlock(nn.Module):
    def __init__(self, dim: int, heads: int, ffn_hidden: int) -> None:
        super().__init__()
        self.attention_norm = RMSNorm(dim)
        self.attention = Attention(dim, heads)
        self.ffn_norm = RMSNorm(dim)
        self.feed_forward = FeedForward(dim, ffn_hidden)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.attention_norm(x), cos, sin)
        return x + self.feed_forward(self.ffn_norm(x))


class Transformer(nn.Module):
    """``[batch, seq]`` token ids -> ``[batch, seq, vocab]`` logits."""

    def __init__(self, vocab: int, dim: int, layers: int, heads: int, ffn_hidden: int,
                 max_seq: int) -> None:
        super().__init__()
        self.tok_embeddings = nn.Embedding(vocab, dim)
        # A ModuleDict keyed "0", "1", ... as torchtitan keeps it (names stay layers.N).
        self.layers = nn.ModuleDict(
            {str(i): TransformerBlock(dim, heads, ffn_hidden) for i in range(layers)})
        self.norm = RMSNorm(dim)
        self.output = nn.Linear(dim, vocab, bias=False)
        cos, sin = rotary_tables(dim // heads, max_seq)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        s = tokens.shape[1]
        cos, sin = self.rope_cos[:s], self.rope_sin[:s]
        h = self.tok_embeddings(tokens)
        for layer in self.layers.values():
            h = layer(h, cos, sin)
        return self.output(self.norm(h))


def shard_model(model: Transformer, compile_blocks=None) -> None:
    """torchtitan's order: every block its own FSDP group, then the root (embeddings, final
    norm and output). Parameters become DTensors ``Shard(0)`` over a 1-D mesh of the world;
    ``reshard_after_forward=True`` frees each block's unsharded parameters after its forward and
    all-gathers them again in backward. ``compile_blocks`` (``module -> module``, e.g.
    ``torch.compile``) replaces each block before it is sharded, as torchtitan's
    ``apply_compile`` does (names stay ``layers.N``: the agent strips ``_orig_mod.``)."""
    if compile_blocks is not None:
        for name, block in list(model.layers.items()):
            model.layers[name] = compile_blocks(block)
    for block in model.layers.values():
        fully_shard(block, reshard_after_forward=True)
    fully_shard(model)


# ---------------------------------------------------------------------------------------- data


class SyntheticTokens:
    """A learnable next-token task: sequences of an affine recurrence ``t[i+1] = (a * t[i] + b)
    mod vocab`` with ``a``, ``b`` fixed by ``seed``; each rank draws its own start tokens (its
    data-parallel shard), seeded by ``seed`` and ``rank``. Inputs are ``t[:-1]``, labels
    ``t[1:]``."""

    def __init__(self, vocab: int, seq_len: int, seed: int, rank: int) -> None:
        g = torch.Generator().manual_seed(seed)
        self.a = int(torch.randint(1, vocab, (1,), generator=g)) | 1
        self.b = int(torch.randint(0, vocab, (1,), generator=g))
        self.vocab = vocab
        self.seq_len = seq_len
        self.gen = torch.Generator().manual_seed(seed * 1_000_003 + 1 + rank)

    def batches(self, batch_size: int) -> Iterator[Tuple[torch.Tensor, torch.Tensor]]:
        while True:
            t = torch.empty(batch_size, self.seq_len + 1, dtype=torch.long)
            t[:, 0] = torch.randint(0, self.vocab, (batch_size,), generator=self.gen)
            for i in range(self.seq_len):
                t[:, i + 1] = (self.a * t[:, i] + self.b) % self.vocab
            yield t[:, :-1].contiguous(), t[:, 1:].contiguous()


# -------------------------------------------------------------------------------------- stacks
# ``step(loss, step) -> True`` when the stack updated the parameters, ``False`` when it skipped.


class NoCheckStack:
    """``none``: backward, clip the gradient norm, step."""

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer, max_norm: float) -> None:
        self.model = model
        self.optimizer = optimizer
        self.max_norm = max_norm

    def clip(self) -> torch.Tensor:
        """``clip_grad_norm_`` over the DTensor gradients: the total norm is a DTensor (each
        rank's partial norm all-reduced over the mesh), the same on every rank."""
        norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.max_norm)
        return norm.full_tensor() if hasattr(norm, "full_tensor") else norm

    def step(self, loss: torch.Tensor, step: int) -> bool:
        loss.backward()
        self.clip()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return True


class RaiseStack(NoCheckStack):
    """``raise``: a non-finite local loss raises before backward. The rank dies; its peers
    wait in FSDP's next collective until the process group timeout."""

    def step(self, loss: torch.Tensor, step: int) -> bool:
        if not torch.isfinite(loss):
            raise RuntimeError(
                f"non-finite loss {loss.item()} at step {step} on rank {dist.get_rank()}")
        return super().step(loss, step)


class SyncedLossStack(NoCheckStack):
    """``synced``: before backward each rank checks what it owns, its loss and its local shards
    (``p.to_local()``), and one all-reduce (MAX) of the two flags makes every rank take the same
    branch; when any is set no rank runs backward (FSDP's backward all-gathers and
    reduce-scatters need every rank) and every rank skips.

    Why the shards: after a shard goes bad, FSDP's next all-gather hands its rows to every rank,
    so every rank's loss goes non-finite and the loss alone cannot say whose shard it was; the
    rank that holds the shard can. It reports ``cause="parameter"`` with ``layer`` = the first
    non-finite parameter in ``named_parameters()`` order; when no rank's shard is bad, a rank
    whose loss is non-finite reports ``loss_math`` (an activation or the inputs made it so).
    Caveat: a non-finite parameter stays non-finite; skipping does not repair it (a rollback
    would).
    Cost: one ``isfinite`` reduction per parameter shard and one all-reduce of two floats per
    step."""

    detector = "loss_check"

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer, max_norm: float) -> None:
        super().__init__(model, optimizer, max_norm)
        self.named = [(name, p) for name, p in model.named_parameters()]

    def _first_bad_shard(self) -> Optional[str]:
        with torch.no_grad():
            finite = torch.stack([torch.isfinite(p.to_local() if hasattr(p, "to_local") else p)
                                  .all() for _, p in self.named])
        bad = (~finite).nonzero()
        return self.named[int(bad[0])][0] if bad.numel() else None

    def step(self, loss: torch.Tensor, step: int) -> bool:
        loss_bad = not bool(torch.isfinite(loss.detach()))
        shard = self._first_bad_shard()
        flags = torch.tensor([float(loss_bad), float(shard is not None)])
        dist.all_reduce(flags, op=dist.ReduceOp.MAX)
        any_loss_bad, any_shard_bad = (v > 0 for v in flags.tolist())
        if any_loss_bad or any_shard_bad:
            if shard is not None:
                nanchaos.report_detection(self.detector, cause="parameter", layer=shard)
            elif loss_bad and not any_shard_bad:  # else a peer's shard explains this loss
                nanchaos.report_detection(self.detector, cause="loss_math")
            nanchaos.report_decision("skip_step")
            self.optimizer.zero_grad(set_to_none=True)
            return False
        return super().step(loss, step)


class GradNormSkipStack(NoCheckStack):
    """``gradnorm``: torchtitan's check. The total gradient norm is already reduced over the
    mesh (the same value everywhere), so every rank takes the same branch with no collective of
    its own; every rank reports, since none can tell whose shard went bad."""

    detector = "grad_norm"

    def step(self, loss: torch.Tensor, step: int) -> bool:
        loss.backward()
        norm = self.clip()
        if not bool(torch.isfinite(norm)):
            nanchaos.report_detection(self.detector, cause="gradient")
            nanchaos.report_decision("skip_step")
            self.optimizer.zero_grad(set_to_none=True)
            return False
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return True


STACKS = {"none": NoCheckStack, "raise": RaiseStack, "synced": SyncedLossStack,
          "gradnorm": GradNormSkipStack}


# ------------------------------------------------------------------------------------- helpers


def local_shard_digest(model: nn.Module) -> str:
    """blake2b over this rank's local shards in ``named_parameters()`` order."""
    import hashlib

    h = hashlib.blake2b(digest_size=16)
    for name, p in model.named_parameters():
        local = p.to_local() if hasattr(p, "to_local") else p
        h.update(name.encode())
        h.update(local.detach().contiguous().numpy().tobytes())
    return h.hexdigest()


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--stack", choices=sorted(STACKS), default="none",
                   help="loss/gradient check stack (default: none)")
    add_process_group_args(p)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--batch-size", type=int, default=8, help="sequences per rank")
    p.add_argument("--seq-len", type=int, default=32)
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
    p.add_argument("--compile", choices=["none", "blocks", "model"], default="none",
                   help="torch.compile each block before fully_shard (torchtitan) or the sharded "
                        "model (default: none)")
    p.add_argument("--compile-backend", default="inductor",
                   help="torch.compile backend (inductor needs g++ on CPU; aot_eager does not)")
    return p.parse_args(argv)


def main(argv: Optional[List[str]] = None) -> int:
    args = parse_args(argv)
    if fully_shard is None:
        sys.stderr.write(f"train_fsdp2: FSDP2 (fully_shard) needs torch >= 2.4; this is torch "
                         f"{torch.__version__}\n")
        return 2
    rank, local_rank, device, backend = init_distributed(args)
    world_size = dist.get_world_size()
    if device.type == "cuda":
        torch.set_default_device(device)

    torch.manual_seed(args.seed)  # the same initial (full) parameters on every rank
    model = Transformer(args.vocab, args.dim, args.layers, args.heads, args.ffn_hidden,
                        args.seq_len).to(device)
    compile_ = lambda m: torch.compile(m, backend=args.compile_backend)  # noqa: E731
    shard_model(model, compile_ if args.compile == "blocks" else None)
    # foreach=True: AdamW's multi-tensor path over the DTensor shards (torchtitan's default).
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.1,
                                  foreach=True)
    stack = STACKS[args.stack](model, optimizer, args.max_norm)
    batches = SyntheticTokens(args.vocab, args.seq_len, args.seed, rank).batches(args.batch_size)
    if rank == 0:
        print(f"train_fsdp2: stack={args.stack} backend={backend} world_size={world_size} "
              f"steps={args.steps} compile={args.compile} torch={torch.__version__}", flush=True)

    forward = compile_(model) if args.compile == "model" else model
    skipped = 0
    loss_value = math.nan
    t0 = time.perf_counter()
    model.train()
    for step in range(args.steps):
        tokens, labels = next(batches)
        tokens, labels = tokens.to(device), labels.to(device)
        logits = forward(tokens)
        loss = F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(0, 1))
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
