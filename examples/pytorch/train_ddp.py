"""Plain DDP training of a small MLP on synthetic data, with a choice of hand-written stacks.

This is the kind of script people write before they have thought about faults, plus the four
detection/recovery stacks they typically add afterwards. It is a nanchaos example job: nanchaos
runs it unchanged, once per rank, injects faults and judges what the chosen ``--stack`` did.

Launch (one process per rank, torchrun's environment: RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR,
MASTER_PORT)::

    python3 -m torch.distributed.run --nproc_per_node 2 train_ddp.py --stack synced

``--stack``:
  none    no check at all.
  raise   a non-finite loss raises before backward (the job dies; its peers time out).
  skip    a non-finite loss skips the iteration on that rank only. The other ranks enter DDP's
          gradient all-reduce without it: the classic desync this harness exists to show.
  synced  every rank agrees (all-reduce MAX of a flag) to skip the step; see ``SyncedSkipStack``.
  amp     bf16 autocast with a GradScaler (``torch.amp``/``torch.cuda.amp``, or a hand-written
          equivalent on CPU before torch 2.3, loss_scaler.py); the scaler's own found_inf skip
          is the stack.

Checkpoints (``--ckpt-dir DIR --save-every N``): after every N-th step rank 0 saves
``{"model", "optimizer", "step"}`` to ``DIR/step-<s>.pt`` (``s``: the next step to run, the
step the checkpoint resumes at), atomically (``torch.save`` to a temporary file, then
``os.replace``), keeping the newest ``--keep``. At start every rank resumes from the newest
checkpoint in DIR that loads, skipping the data the resumed steps already consumed, so a resumed
run continues the uninterrupted one. ``--validate-ckpt`` makes the loader also check that every
tensor of the checkpoint is finite; one that is not is reported
(``nanchaos.report_detection("ckpt_validate", cause="checkpoint_corruption", layer=NAME)``)
and skipped for the next older one. nanchaos relaunches such a job with ``[job] restarts`` and
gives it its own folder through ``{run_dir}`` in ``command``.

``--ckpt-format dcp`` (torch >= 2.2) checkpoints with ``torch.distributed.checkpoint`` instead,
as a sharded job would: every rank calls ``dcp.save`` of ``{"model", "optimizer", "step"}``
(``get_state_dict`` of the model and optimizer) into ``DIR/step-<s>/``; each rank writes its
shard (``__R_0.distcp``: DCP gives each replicated tensor to one rank) and rank 0 the
``.metadata``, last. The loader tries the folders newest first, ``dcp.load`` into
``get_state_dict``'s tensors and ``set_state_dict``; a load that raises (a truncated or missing
shard) is skipped for the next older folder. With ``--validate-ckpt`` every rank first checks its
own shard files against ``.metadata`` (each chunk DCP recorded lies inside its file) and the ranks
agree to skip a folder whose shard is short on any rank; the rank whose shard is bad reports it
(``ckpt_validate``, cause ``checkpoint_corruption``), and the loaded tensors are checked finite.

Model module names (``named_modules()`` of the unwrapped model, the names fault targets use)::

    layers, layers.0, layers.0.linear, layers.0.act, layers.1, layers.1.linear, layers.1.act,
    layers.2, layers.2.linear, layers.2.act, head

Checked on torch 1.13 (gloo, CPU); written against APIs that torch 2.x keeps.
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import os
import shutil
import sys
import time
from typing import Iterator, List, Optional, Tuple

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

from ddp_common import add_process_group_args, init_distributed, nanchaos, parameter_digest
from loss_scaler import make_grad_scaler


# --------------------------------------------------------------------------------------- model


class Block(nn.Module):
    def __init__(self, in_features: int, out_features: int) -> None:
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.act = nn.GELU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.linear(x))


class MLP(nn.Module):
    """``[batch, features]`` -> ``[batch, classes]`` logits: three GELU blocks and a linear head."""

    def __init__(self, features: int, hidden: int, classes: int, depth: int = 3) -> None:
        super().__init__()
        widths = [features] + [hidden] * depth
        self.layers = nn.ModuleList(Block(i, o) for i, o in zip(widths[:-1], widths[1:]))
        self.head = nn.Linear(hidden, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


# ---------------------------------------------------------------------------------------- data


class SyntheticClassification:
    """Labels from a fixed random teacher: ``y = argmax(x @ W)``, ``x ~ N(0, 1)``.

    The teacher is the same on every rank (seeded by ``seed``); each rank draws its own input
    stream (seeded by ``seed`` and ``rank``), the per-rank shard a DistributedSampler would give.
    The held-out batch is the same on every rank. Everything is generated on the CPU with
    ``torch.Generator`` and moved to ``device``, so a run is reproducible on any device.
    """

    def __init__(self, features: int, classes: int, seed: int, rank: int,
                 device: torch.device) -> None:
        teacher = torch.Generator().manual_seed(seed)
        self.weight = torch.randn(features, classes, generator=teacher)
        self.features = features
        self.device = device
        self.train_gen = torch.Generator().manual_seed(seed * 1_000_003 + 1 + rank)
        self.heldout_gen = torch.Generator().manual_seed(seed * 1_000_003 + 999_983)

    def _draw(self, n: int, gen: torch.Generator) -> Tuple[torch.Tensor, torch.Tensor]:
        x = torch.randn(n, self.features, generator=gen)
        y = (x @ self.weight).argmax(dim=1)
        return x.to(self.device), y.to(self.device)

    def batches(self, batch_size: int) -> Iterator[Tuple[torch.Tensor, torch.Tensor]]:
        while True:
            yield self._draw(batch_size, self.train_gen)

    def heldout(self, n: int) -> Tuple[torch.Tensor, torch.Tensor]:
        return self._draw(n, self.heldout_gen)


# -------------------------------------------------------------------------------------- stacks
# A stack owns one iteration after the forward: ``step(loss) -> True`` when it updated the
# parameters, ``False`` when it skipped the update. ``forward_context()`` wraps the forward.


class NoCheckStack:
    """``none``: backward, step. A non-finite value goes straight into the parameters."""

    def __init__(self, model: DistributedDataParallel, optimizer: torch.optim.Optimizer,
                 device: torch.device) -> None:
        self.model = model
        self.optimizer = optimizer
        self.device = device

    def forward_context(self):
        return contextlib.nullcontext()

    def step(self, loss: torch.Tensor, step: int) -> bool:
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return True


class RaiseStack(NoCheckStack):
    """``raise``: a local check of the loss before backward; a non-finite loss raises.

    The rank that raises dies; its peers wait in DDP's all-reduce until ``--pg-timeout-s``.
    """

    def step(self, loss: torch.Tensor, step: int) -> bool:
        if not torch.isfinite(loss):
            raise RuntimeError(
                f"non-finite loss {loss.item()} at step {step} on rank {dist.get_rank()}")
        return super().step(loss, step)


class LocalSkipStack(NoCheckStack):
    """``skip``: a local check that skips the iteration on this rank only.

    Caveat (the point of this stack): the skipping rank does not enter DDP's gradient all-reduce
    while its peers do, so from here on the ranks' collectives are paired one iteration apart
    and their parameters differ; the last all-reduce has no partner and times out.
    """

    def step(self, loss: torch.Tensor, step: int) -> bool:
        if not torch.isfinite(loss):
            self.optimizer.zero_grad(set_to_none=True)
            return False
        return super().step(loss, step)


class SyncedSkipStack(NoCheckStack):
    """``synced``: every rank skips the step together when any rank sees a non-finite value.

    Two checks, each followed by one all-reduce (MAX) of a small flag tensor, so every rank
    takes the same branch (cost: two tiny all-reduces and a few host syncs per step):

    1. Before backward: this rank's loss. If any rank's loss is non-finite, no rank runs
       backward (so no rank is left alone in DDP's gradient all-reduce) and every rank skips.
       The rank whose loss was non-finite reports ``cause="loss_math"`` -- a fault upstream of
       the loss (an activation, the inputs) that makes the loss non-finite is named
       ``loss_math`` too, because the loss is all this check looks at.
    2. After backward: the gradients. A non-finite gradient on one rank reaches every rank
       through DDP's all-reduce, so the reduced gradients cannot tell which rank it came from.
       A gradient hook (``Tensor.register_hook`` on each parameter, which runs on the incoming
       local gradient before it is accumulated into ``.grad`` and before DDP's reducer reads it)
       records whether this rank's *local* gradient was finite. The rank(s) whose local gradient
       was non-finite report ``cause="gradient"`` with ``layer`` = the first such parameter in
       backward order (``named_parameters()`` reversed). If no rank's local gradient was
       non-finite but the reduced ones are (the value went bad after the hooks ran, e.g. in the
       communication), every rank reports, naming the first non-finite reduced gradient: each
       rank's check fired, and none can know more.

    Every rank then reports ``skip_step``, zeroes the gradients and skips ``optimizer.step()``.
    Caveat: the hook order relies on the agent (or any other code) that changes a gradient doing
    so in a hook registered before this stack's, or in the communication.
    """

    detector = "nan_check"

    def __init__(self, model: DistributedDataParallel, optimizer: torch.optim.Optimizer,
                 device: torch.device) -> None:
        super().__init__(model, optimizer, device)
        self.params: List[Tuple[str, nn.Parameter]] = [
            (name, p) for name, p in model.module.named_parameters() if p.requires_grad]
        self.backward_order = list(reversed(self.params))
        self.local_finite = {}  # name -> 0-dim bool tensor, written by the hooks during backward
        for name, p in self.params:
            p.register_hook(self._hook(name))

    def _hook(self, name: str):
        def record(grad: torch.Tensor) -> None:
            self.local_finite[name] = torch.isfinite(grad).all()
        return record

    def _first_bad(self, finite: List[Tuple[str, torch.Tensor]]) -> Optional[str]:
        if not finite:
            return None
        bad = (~torch.stack([f for _, f in finite])).nonzero()
        return finite[int(bad[0])][0] if bad.numel() else None

    def _any_rank(self, *flags: bool) -> List[bool]:
        t = torch.tensor([float(f) for f in flags], device=self.device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return [v > 0 for v in t.tolist()]

    def _skip(self) -> bool:
        nanchaos.report_decision("skip_step")
        self.optimizer.zero_grad(set_to_none=True)
        return False

    def step(self, loss: torch.Tensor, step: int) -> bool:
        loss_bad = not bool(torch.isfinite(loss.detach()))
        (any_loss_bad,) = self._any_rank(loss_bad)
        if any_loss_bad:
            if loss_bad:
                nanchaos.report_detection(self.detector, cause="loss_math")
            return self._skip()

        self.local_finite.clear()
        loss.backward()
        local_layer = self._first_bad(
            [(n, self.local_finite[n]) for n, _ in self.backward_order if n in self.local_finite])
        reduced_layer = self._first_bad(
            [(n, torch.isfinite(p.grad).all()) for n, p in self.backward_order
             if p.grad is not None])
        any_local, any_reduced = self._any_rank(local_layer is not None,
                                                reduced_layer is not None)
        if any_local or any_reduced:
            if local_layer is not None:
                nanchaos.report_detection(self.detector, cause="gradient", layer=local_layer)
            elif not any_local and reduced_layer is not None:
                nanchaos.report_detection(self.detector, cause="gradient", layer=reduced_layer)
            return self._skip()

        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return True


class AmpStack(NoCheckStack):
    """``amp``: bf16 autocast and a GradScaler; the scaler's found_inf skip is the only check.

    Reports nothing (a GradScaler does not): the harness observes the skipped update and the
    scale back-off itself. Caveat: bf16 has fp32's range, so the scaler is not needed against
    overflow; it is here because people keep it when they switch from fp16.
    """

    def __init__(self, model: DistributedDataParallel, optimizer: torch.optim.Optimizer,
                 device: torch.device) -> None:
        super().__init__(model, optimizer, device)
        self.scaler = make_grad_scaler(device.type)

    def forward_context(self):
        if hasattr(torch, "autocast"):
            return torch.autocast(device_type=self.device.type, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def step(self, loss: torch.Tensor, step: int) -> bool:
        scale_before = self.scaler.get_scale()
        self.scaler.scale(loss).backward()
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)
        return self.scaler.get_scale() >= scale_before


STACKS = {"none": NoCheckStack, "raise": RaiseStack, "skip": LocalSkipStack,
          "synced": SyncedSkipStack, "amp": AmpStack}


# ------------------------------------------------------------------------------------- helpers


@torch.no_grad()
def evaluate(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> Tuple[float, float]:
    """Held-out ``(loss, accuracy)`` on the unwrapped model in eval mode (not a training step)."""
    was_training = model.training
    model.eval()
    logits = model(x).float()
    loss = F.cross_entropy(logits, y).item()
    accuracy = (logits.argmax(dim=1) == y).float().mean().item()
    model.train(was_training)
    return loss, accuracy


def save_checkpoint(ckpt_dir: str, model: nn.Module, optimizer: torch.optim.Optimizer,
                    next_step: int, keep: int) -> str:
    """Writes ``ckpt_dir/step-<next_step>.pt`` atomically; removes all but the newest ``keep``."""
    os.makedirs(ckpt_dir, exist_ok=True)
    path = os.path.join(ckpt_dir, f"step-{next_step:06d}.pt")
    tmp = path + ".tmp"
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                "step": next_step}, tmp)
    os.replace(tmp, path)  # a crash before this line leaves the previous newest intact
    for old in sorted(glob.glob(os.path.join(ckpt_dir, "step-*.pt")))[:-keep]:
        os.remove(old)
    return path


def first_nonfinite(state: dict) -> Optional[str]:
    """The name of the first tensor of a checkpoint that holds a NaN or an infinity: a model
    state dict's key, or ``optimizer:ID.STATE`` of an optimizer state; None when all are
    finite."""
    for name, t in state["model"].items():
        if t.is_floating_point() and not bool(torch.isfinite(t).all()):
            return name
    for pid, per_param in state["optimizer"]["state"].items():
        for key, t in per_param.items():
            if (isinstance(t, torch.Tensor) and t.is_floating_point()
                    and not bool(torch.isfinite(t).all())):
                return f"optimizer:{pid}.{key}"
    return None


def resume(ckpt_dir: str, model: nn.Module, optimizer: torch.optim.Optimizer,
           device: torch.device, validate: bool = False) -> int:
    """Loads the newest checkpoint of ``ckpt_dir`` that loads (and, with ``validate``, whose
    tensors are all finite); returns its step (0: none)."""
    for path in sorted(glob.glob(os.path.join(ckpt_dir, "step-*.pt")), reverse=True):
        try:
            state = torch.load(path, map_location=device)
        except Exception as e:  # a truncated or unreadable file: try the next older one
            print(f"train_ddp: skipping checkpoint {path}: {e}", file=sys.stderr, flush=True)
            continue
        bad = first_nonfinite(state) if validate else None
        if bad is not None:
            print(f"train_ddp: skipping checkpoint {path}: {bad} is not finite", file=sys.stderr,
                  flush=True)
            nanchaos.report_detection("ckpt_validate", cause="checkpoint_corruption", layer=bad,
                                      step=int(state["step"]))
            continue
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        return int(state["step"])
    return 0


def _dcp():
    """``(torch.distributed.checkpoint, get_state_dict, set_state_dict)``; SystemExit naming the
    version on a torch without ``dcp.save(..., checkpoint_id=...)`` and ``get_state_dict``."""
    try:
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
    except ImportError as e:
        raise SystemExit(f"train_ddp: --ckpt-format dcp needs torch >= 2.2 "
                         f"(this is {torch.__version__}: {e})") from None
    return dcp, get_state_dict, set_state_dict


def save_checkpoint_dcp(ckpt_dir: str, model: nn.Module, optimizer: torch.optim.Optimizer,
                        next_step: int, keep: int) -> str:
    """Every rank: ``dcp.save`` into ``ckpt_dir/step-<next_step>/`` (a shard per rank, the
    ``.metadata`` last); then rank 0 removes all but the newest ``keep`` folders."""
    dcp, get_state_dict, _ = _dcp()
    path = os.path.join(ckpt_dir, f"step-{next_step:06d}")
    model_sd, optim_sd = get_state_dict(model, optimizer)
    dcp.save({"model": model_sd, "optimizer": optim_sd, "step": next_step}, checkpoint_id=path)
    if dist.get_rank() == 0:  # the save is collective: every shard is in place
        for old in sorted(glob.glob(os.path.join(ckpt_dir, "step-*")))[:-keep]:
            shutil.rmtree(old, ignore_errors=True)
    return path


def short_shard(path: str, rank: int) -> Optional[str]:
    """This rank's shard files of the DCP checkpoint ``path`` checked against its
    ``.metadata``: the first file that is missing or shorter than a chunk DCP recorded in it
    (``"__1_0.distcp"``), else None."""
    dcp, _, _ = _dcp()
    metadata = dcp.FileSystemReader(path).read_metadata()
    need = {}
    for info in (metadata.storage_data or {}).values():
        if info.relative_path.startswith(f"__{rank}_"):
            need[info.relative_path] = max(need.get(info.relative_path, 0),
                                           info.offset + info.length)
    for name, end in sorted(need.items()):
        f = os.path.join(path, name)
        if not os.path.exists(f) or os.path.getsize(f) < end:
            return name
    return None


def resume_dcp(ckpt_dir: str, model: nn.Module, optimizer: torch.optim.Optimizer,
               validate: bool = False) -> int:
    """Every rank: loads the newest DCP checkpoint folder of ``ckpt_dir`` that loads (and, with
    ``validate``, whose shards match their metadata on every rank and whose tensors are all
    finite); returns its step (0: none)."""
    dcp, get_state_dict, set_state_dict = _dcp()
    rank = dist.get_rank()
    for path in sorted(glob.glob(os.path.join(ckpt_dir, "step-*")), reverse=True):
        if not os.path.exists(os.path.join(path, ".metadata")):
            continue  # a save that did not complete
        step = int(os.path.basename(path).split("-")[1])
        if validate:
            bad = short_shard(path, rank)
            if bad is not None:
                print(f"train_ddp: rank {rank}: checkpoint {path}: shard {bad} is shorter than "
                      f"its metadata says", file=sys.stderr, flush=True)
                nanchaos.report_detection("ckpt_validate", cause="checkpoint_corruption",
                                          step=step)
            flag = torch.tensor([1.0 if bad is not None else 0.0])
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)  # skip it on every rank, or on none
            if flag.item() > 0:
                continue
        model_sd, optim_sd = get_state_dict(model, optimizer)
        state = {"model": model_sd, "optimizer": optim_sd, "step": 0}
        try:
            dcp.load(state, checkpoint_id=path)
        except (Exception, dcp.CheckpointException) as e:  # DCP's is a BaseException, raised
            # on every rank when one shard cannot be read
            print(f"train_ddp: skipping checkpoint {path}: {type(e).__name__}",
                  file=sys.stderr, flush=True)
            continue
        bad_tensor = first_nonfinite(state)
        if validate and bad_tensor is not None:
            print(f"train_ddp: skipping checkpoint {path}: {bad_tensor} is not finite",
                  file=sys.stderr, flush=True)
            nanchaos.report_detection("ckpt_validate", cause="checkpoint_corruption",
                                      layer=bad_tensor, step=int(state["step"]))
            continue
        set_state_dict(model, optimizer, model_state_dict=state["model"],
                       optim_state_dict=state["optimizer"])
        return int(state["step"])
    return 0


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--stack", choices=sorted(STACKS), default="none",
                   help="hand-written detection/recovery stack (default: none)")
    add_process_group_args(p)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--batch-size", type=int, default=32, help="per rank")
    p.add_argument("--lr", type=float, default=1e-2)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--features", type=int, default=16)
    p.add_argument("--hidden", type=int, default=32)
    p.add_argument("--classes", type=int, default=4)
    p.add_argument("--log-every", type=int, default=5, help="loss line on rank 0 every N steps")
    p.add_argument("--eval-every", type=int, default=0, help="held-out eval every N steps "
                   "(0: only at the end)")
    p.add_argument("--ckpt-dir", default="", help="save and resume checkpoints here")
    p.add_argument("--save-every", type=int, default=0,
                   help="save a checkpoint after every N-th step (0: never)")
    p.add_argument("--keep", type=int, default=2, help="checkpoints kept (newest)")
    p.add_argument("--ckpt-format", choices=("torch", "dcp"), default="torch",
                   help="torch: rank 0 torch.save's one file; dcp: torch.distributed.checkpoint, "
                        "a folder with a shard per rank (torch >= 2.2)")
    p.add_argument("--validate-ckpt", action="store_true",
                   help="skip a checkpoint holding a non-finite tensor (dcp: or a shard shorter "
                        "than its metadata) for the next older one")
    p.add_argument("--print-digest", action="store_true",
                   help="print each rank's parameter digest at the end")
    return p.parse_args(argv)


def main(argv: Optional[List[str]] = None) -> int:
    args = parse_args(argv)
    rank, local_rank, device, backend = init_distributed(args)
    world_size = dist.get_world_size()

    torch.manual_seed(args.seed)  # same initial parameters on every rank (DDP also broadcasts)
    model = MLP(args.features, args.hidden, args.classes).to(device)
    ddp_model = DistributedDataParallel(
        model, device_ids=[local_rank] if device.type == "cuda" else None)
    optimizer = torch.optim.Adam(ddp_model.parameters(), lr=args.lr)
    stack = STACKS[args.stack](ddp_model, optimizer, device)

    dcp_format = args.ckpt_format == "dcp"
    if not args.ckpt_dir:
        start = 0
    elif dcp_format:
        start = resume_dcp(args.ckpt_dir, model, optimizer, args.validate_ckpt)
    else:
        start = resume(args.ckpt_dir, model, optimizer, device, args.validate_ckpt)
    data = SyntheticClassification(args.features, args.classes, args.seed, rank, device)
    heldout_x, heldout_y = data.heldout(256)
    batches = data.batches(args.batch_size)
    for _ in range(start):  # the data position: the batches the resumed steps already used
        next(batches)
    if rank == 0:
        print(f"train_ddp: stack={args.stack} backend={backend} world_size={world_size} "
              f"steps={args.steps} torch={torch.__version__}"
              + (f" resumed at step {start}" if start else ""), flush=True)

    skipped = 0
    t0 = time.perf_counter()
    for step in range(start, args.steps):
        x, y = next(batches)
        with stack.forward_context():
            logits = ddp_model(x)
        loss = F.cross_entropy(logits.float(), y)
        loss_value = loss.item()
        if not stack.step(loss, step):
            skipped += 1
        if rank == 0 and (step % args.log_every == 0 or step == args.steps - 1):
            print(f"step {step:4d} | loss {loss_value:.4f} | skipped {skipped}", flush=True)
        if args.save_every and args.ckpt_dir and (step + 1) % args.save_every == 0:
            if dcp_format:  # collective: every rank saves its shard
                save_checkpoint_dcp(args.ckpt_dir, model, optimizer, step + 1, args.keep)
            elif rank == 0:
                save_checkpoint(args.ckpt_dir, model, optimizer, step + 1, args.keep)
        if args.eval_every and step % args.eval_every == args.eval_every - 1 and rank == 0:
            print(f"step {step:4d} | heldout loss {evaluate(model, heldout_x, heldout_y)[0]:.4f}",
                  flush=True)
    elapsed = time.perf_counter() - t0

    heldout_loss, accuracy = evaluate(model, heldout_x, heldout_y)
    if rank == 0:
        print(f"done: {args.steps - start} steps ({skipped} skipped on rank 0) in {elapsed:.2f} s | "
              f"heldout loss {heldout_loss:.4f} accuracy {accuracy:.3f}", flush=True)
    if args.print_digest:
        print(f"digest rank {rank} {parameter_digest(model)}", flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
