"""Train a small GPT the way nanoGPT's ``train.py`` does (nanchaos' own code, same behaviour).

Single process::

    python3 train.py --device=cpu --dtype=float32 --compile=False

Distributed data parallel, one process per rank (torchrun, or anything that sets ``RANK``,
``LOCAL_RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``)::

    torchrun --standalone --nproc_per_node=2 train.py --backend=gloo --device=cpu

What it keeps from nanoGPT, on purpose, since that is the job under test:
  * DDP is decided by ``RANK`` alone (``int(os.environ.get("RANK", -1)) != -1``), and then
    ``init_process_group(backend)`` with ``backend = "nccl"`` unless overridden: a CPU-only
    host with ``RANK`` set dies there (why nanchaos needs ``[job] launch = "plain"`` for it);
  * configuration is the module-level globals below, overridden by ``--key=value`` arguments
    or a config file (configurator.py);
  * a plain loop: random windows of a token stream (``get_batch``), ``estimate_loss`` under
    ``torch.no_grad()`` and ``model.eval()`` every ``eval_interval`` on the master process,
    ``get_lr`` (linear warmup, cosine decay) written into every param group, gradient
    accumulation with ``loss / gradient_accumulation_steps`` and ``require_backward_grad_sync``
    on the last micro-step only, a ``GradScaler`` enabled for float16 only, ``clip_grad_norm_``,
    AdamW with decay / no-decay groups, an optional ``torch.compile``;
  * it trains iterations ``0 .. max_iters`` inclusive, i.e. ``max_iters + 1`` optimizer steps;
  * no check for a non-finite loss or gradient anywhere: a NaN trains on unnoticed.
Where it differs: the data is a synthetic token stream generated in-process (no dataset to
download), the default model is tiny (about 25k parameters) so a run takes seconds on one CPU
core, the default device is ``cuda`` only when torch sees a GPU, and a ``--device=cpu`` run
stays on the CPU under DDP too (nanoGPT always takes ``cuda:LOCAL_RANK`` there), so
``--backend=gloo --device=cpu`` runs under torchrun on a CPU host.
"""

import math
import os
import random
import sys
import time
from contextlib import nullcontext

import torch
from torch.distributed import destroy_process_group, init_process_group
from torch.nn.parallel import DistributedDataParallel as DDP

import configurator
from model import GPT, GPTConfig

# ----------------------------------------------------------------------------------------------
# Configuration: every global below can be overridden with --key=value (or a config file).
# I/O
out_dir = ""  # where ckpt.pt goes; "" saves no checkpoint
eval_interval = 20
log_interval = 1
eval_iters = 4  # batches per split per evaluation
eval_only = False  # evaluate once at iteration 0, then exit
always_save_checkpoint = False  # save at every evaluation, not only when val loss improved
init_from = "scratch"  # "scratch" or "resume" (from out_dir/ckpt.pt)
# data: a synthetic stream (see SyntheticStream)
data_seed = 0
data_tokens = 20000
gradient_accumulation_steps = 2  # micro-batches per iteration (divided by the world size)
batch_size = 8  # per micro-batch
block_size = 32
vocab_size = 64
# model
n_layer = 2
n_head = 2
n_embd = 32
dropout = 0.0
bias = False
# AdamW
learning_rate = 1e-2
max_iters = 40
weight_decay = 1e-1
beta1 = 0.9
beta2 = 0.99
grad_clip = 1.0  # 0.0 disables clipping
# learning rate schedule
decay_lr = True
warmup_iters = 5
lr_decay_iters = 40
min_lr = 1e-3
# DDP
backend = "nccl"
# system
device = "cuda" if torch.cuda.is_available() else "cpu"
dtype = ("bfloat16" if torch.cuda.is_available() and torch.cuda.is_bf16_supported()
         else "float16" if torch.cuda.is_available() else "float32")
compile = False  # nanoGPT's default is True; a tiny CPU run is over before compiling pays off
seed = 1337
config_keys = [k for k, v in globals().items()
               if not k.startswith("_") and isinstance(v, (int, float, bool, str))]
configurator.apply(globals(), sys.argv[1:])
config = {k: globals()[k] for k in config_keys}
# ----------------------------------------------------------------------------------------------

ddp = int(os.environ.get("RANK", -1)) != -1
if ddp:
    init_process_group(backend=backend)
    ddp_rank = int(os.environ["RANK"])
    ddp_local_rank = int(os.environ["LOCAL_RANK"])
    ddp_world_size = int(os.environ["WORLD_SIZE"])
    if device.startswith("cuda"):
        device = f"cuda:{ddp_local_rank}"
        torch.cuda.set_device(device)
    master_process = ddp_rank == 0
    seed_offset = ddp_rank
    if gradient_accumulation_steps % ddp_world_size:
        raise SystemExit(f"gradient_accumulation_steps={gradient_accumulation_steps} is not a "
                         f"multiple of the world size {ddp_world_size}")
    gradient_accumulation_steps //= ddp_world_size
else:
    master_process = True
    seed_offset = 0
    ddp_world_size = 1
tokens_per_iter = gradient_accumulation_steps * ddp_world_size * batch_size * block_size
if master_process:
    print(f"tokens per iteration will be: {tokens_per_iter:,} (torch {torch.__version__}, "
          f"{'DDP over ' + backend + ', world size ' + str(ddp_world_size) if ddp else 'single process'})",
          flush=True)
    if out_dir:
        os.makedirs(out_dir, exist_ok=True)

torch.manual_seed(seed + seed_offset)
torch.backends.cuda.matmul.allow_tf32 = True
torch.backends.cudnn.allow_tf32 = True
device_type = "cuda" if "cuda" in device else "cpu"
ptdtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]
ctx = (nullcontext() if device_type == "cpu"
       else torch.autocast(device_type=device_type, dtype=ptdtype))


class SyntheticStream:
    """A deterministic token stream with structure a small model can learn.

    Each token follows from the previous one: with probability 0.85 ``rule[prev]`` (a fixed
    random table, seeded by ``data_seed``), else uniformly at random, so a model that learns
    the rule drives the loss from ``ln(vocab_size)`` toward the stream's entropy (~0.9 nats
    for 64 tokens).
    The same stream on every rank (the seed does not depend on the rank); 90% train, 10% val.
    """

    def __init__(self, vocab: int, tokens: int, seed_: int) -> None:
        rng = random.Random(seed_)
        rule = [rng.randrange(vocab) for _ in range(vocab)]
        stream = [rng.randrange(vocab)]
        for _ in range(tokens - 1):
            if rng.random() < 0.85:
                stream.append(rule[stream[-1]])
            else:
                stream.append(rng.randrange(vocab))
        data = torch.tensor(stream, dtype=torch.int16 if vocab <= 32767 else torch.int32)
        n = int(0.9 * len(data))
        self.train, self.val = data[:n], data[n:]


stream = SyntheticStream(vocab_size, data_tokens, data_seed)


def get_batch(split):
    data = stream.train if split == "train" else stream.val
    ix = torch.randint(len(data) - block_size, (batch_size,))
    x = torch.stack([data[i:i + block_size].long() for i in ix.tolist()])
    y = torch.stack([data[i + 1:i + 1 + block_size].long() for i in ix.tolist()])
    if device_type == "cuda":
        return (x.pin_memory().to(device, non_blocking=True),
                y.pin_memory().to(device, non_blocking=True))
    return x.to(device), y.to(device)


iter_num = 0
best_val_loss = 1e9
model_args = dict(n_layer=n_layer, n_head=n_head, n_embd=n_embd, block_size=block_size,
                  bias=bias, vocab_size=vocab_size, dropout=dropout)
checkpoint = None
if init_from == "scratch":
    model = GPT(GPTConfig(**model_args))
elif init_from == "resume":
    ckpt_path = os.path.join(out_dir, "ckpt.pt")
    print(f"resuming training from {ckpt_path}", flush=True)
    checkpoint = torch.load(ckpt_path, map_location=device)
    for k in ("n_layer", "n_head", "n_embd", "block_size", "bias", "vocab_size"):
        model_args[k] = checkpoint["model_args"][k]
    model = GPT(GPTConfig(**model_args))
    state_dict = {k[len("_orig_mod."):] if k.startswith("_orig_mod.") else k: v
                  for k, v in checkpoint["model"].items()}
    model.load_state_dict(state_dict)
    iter_num = checkpoint["iter_num"]
    best_val_loss = checkpoint["best_val_loss"]
else:
    raise SystemExit(f"init_from must be 'scratch' or 'resume', not {init_from!r}")
model.to(device)
if master_process:
    print(f"number of parameters: {model.get_num_params() / 1e3:.1f}k", flush=True)

# A GradScaler that does anything only for float16 (a no-op for float32 and bfloat16).
if hasattr(torch, "amp") and hasattr(torch.amp, "GradScaler"):  # torch >= 2.3
    scaler = torch.amp.GradScaler(device_type, enabled=(dtype == "float16"))
else:
    scaler = torch.cuda.amp.GradScaler(enabled=(dtype == "float16"))

optimizer = model.configure_optimizers(weight_decay, learning_rate, (beta1, beta2), device_type)
if checkpoint is not None:
    optimizer.load_state_dict(checkpoint["optimizer"])
checkpoint = None

if compile:
    if hasattr(torch, "compile"):
        print("compiling the model...", flush=True)
        unoptimized_model = model
        model = torch.compile(model)
    else:
        print(f"compile=True, but torch {torch.__version__} has no torch.compile: running eager",
              flush=True)

if ddp:
    model = DDP(model, device_ids=[ddp_local_rank] if device_type == "cuda" else None)
raw_model = model.module if ddp else model


@torch.no_grad()
def estimate_loss():
    """Mean loss over ``eval_iters`` random batches of each split, in eval mode."""
    out = {}
    model.eval()
    for split in ("train", "val"):
        losses = torch.zeros(eval_iters)
        for k in range(eval_iters):
            X, Y = get_batch(split)
            with ctx:
                _, loss = model(X, Y)
            losses[k] = loss.item()
        out[split] = losses.mean().item()
    model.train()
    return out


def get_lr(it):
    """Linear warmup for ``warmup_iters``, cosine decay to ``min_lr`` at ``lr_decay_iters``."""
    if it < warmup_iters:
        return learning_rate * (it + 1) / (warmup_iters + 1)
    if it > lr_decay_iters:
        return min_lr
    decay_ratio = (it - warmup_iters) / (lr_decay_iters - warmup_iters)
    coeff = 0.5 * (1.0 + math.cos(math.pi * decay_ratio))
    return min_lr + coeff * (learning_rate - min_lr)


X, Y = get_batch("train")  # the first batch, fetched ahead
t0 = time.time()
local_iter_num = 0
while True:
    lr = get_lr(iter_num) if decay_lr else learning_rate
    for param_group in optimizer.param_groups:
        param_group["lr"] = lr

    if iter_num % eval_interval == 0 and master_process:
        losses = estimate_loss()
        print(f"step {iter_num}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}",
              flush=True)
        if losses["val"] < best_val_loss or always_save_checkpoint:
            best_val_loss = losses["val"]
            if iter_num > 0 and out_dir:
                print(f"saving checkpoint to {out_dir}", flush=True)
                torch.save({"model": raw_model.state_dict(), "optimizer": optimizer.state_dict(),
                            "model_args": model_args, "iter_num": iter_num,
                            "best_val_loss": best_val_loss, "config": config},
                           os.path.join(out_dir, "ckpt.pt"))
    if iter_num == 0 and eval_only:
        break

    # Gradient accumulation; under DDP the gradients are all-reduced in the last backward only.
    for micro_step in range(gradient_accumulation_steps):
        if ddp:
            model.require_backward_grad_sync = micro_step == gradient_accumulation_steps - 1
        with ctx:
            logits, loss = model(X, Y)
            loss = loss / gradient_accumulation_steps
        X, Y = get_batch("train")  # the next batch while this one's backward runs
        scaler.scale(loss).backward()
    if grad_clip != 0.0:
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)

    t1 = time.time()
    dt = t1 - t0
    t0 = t1
    if iter_num % log_interval == 0 and master_process:
        lossf = loss.item() * gradient_accumulation_steps  # the last micro-step's loss
        print(f"iter {iter_num}: loss {lossf:.4f}, time {dt * 1000:.2f}ms, lr {lr:.2e}",
              flush=True)
    iter_num += 1
    local_iter_num += 1
    if iter_num > max_iters:
        break

if ddp:
    destroy_process_group()
