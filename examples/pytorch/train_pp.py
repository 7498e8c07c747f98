"""Pipeline-parallel training of a small Llama-style decoder, in the shape of a torchtitan loop.

A nanchaos example job for ``torch.distributed.pipelining``: the decoder of ``train_fsdp2.py``
(same module names) split into pipeline stages the way torchtitan's ``pipeline_llm`` splits it:
for each stage the rank holds, it builds the whole model from the same seed, then deletes the
modules of the other stages (``tok_embeddings`` stays on the first stage, ``norm`` and
``output`` on the last, the blocks ``layers.N`` are divided evenly in order), so the names stay
the full model's FQNs. ``PipelineStage`` wraps each part.

Schedules (``--schedule``): ``gpipe`` (``ScheduleGPipe``) and ``1f1b`` (``Schedule1F1B``) run one
stage per rank; ``interleaved1f1b`` (``ScheduleInterleaved1F1B``), ``loopedbfs``
(``ScheduleLoopedBFS``) and ``interleavedzb`` (``ScheduleInterleavedZeroBubble``) run
``--stages-per-rank`` stages per rank, placed round robin as torchtitan's "loop" style does:
stage ``s`` on rank ``s % ranks`` (2 ranks x 2 stages: rank 0 holds stages 0 and 2, rank 1
stages 1 and 3). Each ``schedule.step()`` runs ``--microbatches`` micro-batches: forwards with
activations sent to the next stage, backwards with input gradients sent back. Every rank draws
the same batch (the rank holding the first stage feeds the tokens, the one holding the last the
labels). One AdamW over the rank's parts, gradient clipping over all stages, and a choice of
check stacks. nanchaos runs it unchanged, once per rank.

Launch (one process per rank, torchrun's environment)::

    python3 -m torch.distributed.run --nproc_per_node 2 train_pp.py --stack synced

``--stack``:
  none      no check: schedule step, clip (global norm: each stage's squared norm, one
            all-reduce), optimizer step.
  synced    after the schedule step the last stage checks its micro-batch losses; one
            all-reduce (MAX) of the flag makes every stage take the same branch; when the loss
            is not finite the last stage reports ``loss_check`` (``cause="loss_math"``: it cannot
            tell which stage's activation made it so) and every stage skips the update.
  gradnorm  torchtitan's idiom: the total gradient norm over all stages (each rank's squared
            norm of its stages' gradients, summed by one all-reduce: the same value on every
            rank) is computed before clipping; a non-finite norm skips the update on every rank
            (``grad_norm``, ``cause="gradient"``, reported by every rank: none can tell whose
            stage it came from).

Shapes: tokens ``[batch, seq]`` int64; activations between stages ``[batch/microbatches, seq,
dim]`` float32; logits ``[batch/microbatches, seq, vocab]``. Exits 2 with the message when the
layers or the batch do not divide by the stages / micro-batches, or when a one-stage schedule is
asked for several stages per rank (and the reverse).

Needs torch >= 2.4 (``torch.distributed.pipelining``); checked on torch 2.15 (gloo, CPU). Every
rank passes ``loss_fn`` to the schedule: a stage built without one runs no backward (torch's
rule), and the first stage then never receives its gradients.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from typing import List, Optional

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

from ddp_common import add_process_group_args, init_distributed, nanchaos
from train_fsdp2 import SyntheticTokens, Transformer

try:
    from torch.distributed import pipelining
    from torch.distributed.pipelining import PipelineStage
except ImportError:  # torch < 2.4
    PipelineStage = None

#: ``--schedule`` -> (the class's name in ``torch.distributed.pipelining``, several stages per
#: rank). Looked up at run time: an older torch may lack the interleaved ones.
SCHEDULES = {"gpipe": ("ScheduleGPipe", False), "1f1b": ("Schedule1F1B", False),
             "interleaved1f1b": ("ScheduleInterleaved1F1B", True),
             "loopedbfs": ("ScheduleLoopedBFS", True),
             "interleavedzb": ("ScheduleInterleavedZeroBubble", True)}


class StageTransformer(Transformer):
    """``Transformer`` whose forward skips the modules this stage deleted (set to None or
    removed from ``layers``): the first stage maps tokens ``[b, s]`` to activations ``[b, s,
    dim]``, a middle stage activations to activations, the last activations to logits."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = x.shape[1]
        cos, sin = self.rope_cos[:s], self.rope_sin[:s]
        h = self.tok_embeddings(x) if self.tok_embeddings is not None else x
        for layer in self.layers.values():
            h = layer(h, cos, sin)
        if self.norm is not None:
            h = self.norm(h)
        return self.output(h) if self.output is not None else h


def keep_stage(model: StageTransformer, stage: int, stages: int) -> List[str]:
    """Deletes every module that is not stage ``stage``'s (of ``stages``), in place; returns the
    block names kept. ``ValueError`` when the blocks do not divide evenly."""
    names = list(model.layers.keys())
    if len(names) % stages:
        raise ValueError(f"{len(names)} layers do not split evenly over {stages} stages")
    per = len(names) // stages
    mine = names[stage * per:(stage + 1) * per]
    for name in names:
        if name not in mine:
            del model.layers[name]
    if stage != 0:
        model.tok_embeddings = None
    if stage != stages - 1:
        model.norm = None
        model.output = None
    return mine


def loss_fn(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean token cross-entropy of one micro-batch: logits ``[b, s, vocab]``, labels ``[b, s]``."""
    return F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(0, 1))


def total_grad_norm(parts: List[nn.Module]) -> torch.Tensor:
    """The L2 norm of every stage's gradients (a 0-d float32 tensor, the same on every rank):
    this rank's squared norm over its ``parts`` summed over the ranks by one all-reduce, as
    torchtitan's pipeline-aware ``clip_grad_norm_`` does. NaN when any gradient is."""
    grads = [p.grad for m in parts for p in m.parameters() if p.grad is not None]
    sq = torch.stack([g.detach().float().pow(2).sum() for g in grads]).sum() if grads else \
        torch.zeros(())
    dist.all_reduce(sq)
    return sq.sqrt()


def clip_all_stages(parts: List[nn.Module], max_norm: float,
                    norm: Optional[torch.Tensor] = None) -> torch.Tensor:
    """``clip_grad_norm_`` over the whole pipeline: every stage scales by the same total norm
    (``total_grad_norm``, computed here unless given). Returns the norm."""
    if norm is None:
        norm = total_grad_norm(parts)
    scale = torch.clamp(max_norm / (norm + 1e-6), max=1.0)
    for m in parts:
        for p in m.parameters():
            if p.grad is not None:
                p.grad.mul_(scale)
    return norm


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--stack", choices=["none", "synced", "gradnorm"], default="none",
                   help="loss/gradient check stack (default: none)")
    p.add_argument("--schedule", choices=sorted(SCHEDULES), default="gpipe")
    p.add_argument("--stages-per-rank", type=int, default=None,
                   help="pipeline stages per rank (default: 1, or 2 for the interleaved and "
                        "looped schedules)")
    add_process_group_args(p)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--batch-size", type=int, default=8, help="sequences per step")
    p.add_argument("--microbatches", type=int, default=4, help="divides --batch-size")
    p.add_argument("--seq-len", type=int, default=32)
    p.add_argument("--vocab", type=int, default=64)
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--layers", type=int, default=4, help="divisible by the stage count")
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--ffn-hidden", type=int, default=128)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--max-norm", type=float, default=1.0, help="gradient clipping norm")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--log-every", type=int, default=5, help="loss line every N steps")
    return p.parse_args(argv)


def main(argv: Optional[List[str]] = None) -> int:
    args = parse_args(argv)
    if PipelineStage is None:
        sys.stderr.write(f"train_pp: pipeline parallelism (torch.distributed.pipelining) needs "
                         f"torch >= 2.4; this is torch {torch.__version__}\n")
        return 2
    if args.batch_size % args.microbatches:
        sys.stderr.write(f"train_pp: --batch-size {args.batch_size} does not split into "
                         f"{args.microbatches} micro-batches\n")
        return 2
    cls_name, multi = SCHEDULES[args.schedule]
    per_rank = args.stages_per_rank if args.stages_per_rank is not None else (2 if multi else 1)
    if per_rank < 1 or (per_rank > 1) != multi:
        sys.stderr.write(f"train_pp: --schedule {args.schedule} runs "
                         f"{'several stages' if multi else 'one stage'} per rank, not "
                         f"--stages-per-rank {per_rank}\n")
        return 2
    schedule_cls = getattr(pipelining, cls_name, None)
    if schedule_cls is None:
        sys.stderr.write(f"train_pp: torch {torch.__version__} has no {cls_name}\n")
        return 2
    rank, _, device, backend = init_distributed(args)
    ranks = dist.get_world_size()
    stages = ranks * per_rank
    mine = [rank + i * ranks for i in range(per_rank)]  # "loop" style: stage s on rank s % ranks
    parts: List[StageTransformer] = []
    pipeline_stages = []
    kept: List[List[str]] = []
    for s in mine:
        torch.manual_seed(args.seed)  # the same full model for every stage, then keep its part
        part = StageTransformer(args.vocab, args.dim, args.layers, args.heads, args.ffn_hidden,
                                args.seq_len).to(device)
        try:
            kept.append(keep_stage(part, s, stages))
        except ValueError as e:
            sys.stderr.write(f"train_pp: {e}\n")
            return 2
        parts.append(part)
        pipeline_stages.append(PipelineStage(part, s, stages, device))
    first, last = 0 in mine, stages - 1 in mine
    if multi:
        schedule = schedule_cls(pipeline_stages, n_microbatches=args.microbatches, loss_fn=loss_fn)
    else:
        schedule = schedule_cls(pipeline_stages[0], n_microbatches=args.microbatches,
                                loss_fn=loss_fn)
    optimizer = torch.optim.AdamW([p for m in parts for p in m.parameters()], lr=args.lr,
                                  weight_decay=0.1)
    # One data stream for the whole pipeline: every stage draws the same batch.
    batches = SyntheticTokens(args.vocab, args.seq_len, args.seed, 0).batches(args.batch_size)
    print(f"train_pp: rank {rank} stages {mine}/{stages} layers {kept} stack={args.stack} "
          f"schedule={args.schedule} backend={backend} torch={torch.__version__}", flush=True)
    skipped = 0
    loss_value = math.nan
    t0 = time.perf_counter()
    for m in parts:
        m.train()
    for step in range(args.steps):
        tokens, labels = next(batches)
        losses: List[torch.Tensor] = []
        inputs = (tokens.to(device),) if first else ()
        if last:
            schedule.step(*inputs, target=labels.to(device), losses=losses)
        else:
            schedule.step(*inputs)
        if last:
            loss_value = float(torch.stack([l.detach() for l in losses]).mean())
        skip = False
        norm = None
        if args.stack == "synced":
            flag = torch.tensor([float(last and not math.isfinite(loss_value))])
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
            skip = bool(flag.item() > 0)
            if skip:
                if last:
                    nanchaos.report_detection("loss_check", cause="loss_math")
                nanchaos.report_decision("skip_step")
        elif args.stack == "gradnorm":
            norm = total_grad_norm(parts)  # the same on every rank: every rank takes one branch
            skip = not bool(torch.isfinite(norm))
            if skip:
                nanchaos.report_detection("grad_norm", cause="gradient")
                nanchaos.report_decision("skip_step")
        if skip:
            skipped += 1
        else:
            clip_all_stages(parts, args.max_norm, norm)
            optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if last and (step % args.log_every == 0 or step == args.steps - 1):
            print(f"step {step:4d} | loss {loss_value:.4f} | skipped {skipped}", flush=True)
    elapsed = time.perf_counter() - t0
    if last:
        print(f"done: {args.steps} steps ({skipped} skipped) in {elapsed:.2f} s | "
              f"{1000 * elapsed / max(args.steps, 1):.1f} ms/step | last loss {loss_value:.4f}",
              flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
