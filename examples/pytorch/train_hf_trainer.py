"""A Hugging Face ``Trainer`` job as that community writes one: a ``transformers`` model built
from its config, a ``Dataset`` of ``input_ids``/``labels`` dicts, ``TrainingArguments`` and
``Trainer.train()``; under torchrun's environment the Trainer (through Accelerate) wraps the model
in ``DistributedDataParallel`` itself. Nothing in it knows about nanchaos beyond the optional
``report_*`` calls of its stack.

Model: ``GPT2LMHeadModel`` from a tiny ``GPT2Config`` (``--n-layer`` 2, ``n_embd`` 64, 4 heads,
vocabulary 96, context 32): names ``transformer.wte``, ``transformer.h.N.attn.c_attn``,
``transformer.h.N.mlp.c_fc``, ``transformer.ln_f``, ``lm_head``, ... (``nanchaos targets``
prints them). The loss is the model's own (``labels`` given, cross-entropy inside ``forward``).
Data: a fixed synthetic token stream (a noisy repeating pattern, so the loss falls).

Stacks (``--stack``), a ``Trainer`` subclass overriding ``training_step``, the place HF users
put such checks:

=======  ==================================================================================
none     nothing (HF's ``logging_nan_inf_filter`` only hides a non-finite loss from the logs)
skip     after backward, one all-reduce (MAX) of "this rank's loss is non-finite"; when set,
         every rank drops its gradients (``zero_grad(set_to_none=True)``: the optimizer then
         leaves every parameter alone), the rank that saw it calls
         ``report_detection("nan_check", cause="loss_math")``, all call
         ``report_decision("skip_step")``
abort    the same check; every rank reports ``abort`` and raises ``FloatingPointError``
=======  ==================================================================================

Run without the harness (one process per rank, torchrun's environment, gloo on CPU)::

    python3 -m torch.distributed.run --nproc_per_node 2 train_hf_trainer.py --stack skip

``--max-steps`` optimizer steps (default 20), ``--pg-timeout-s`` the process group timeout
(default 10 s; ``TrainingArguments.ddp_timeout``, which transformers 5.24 passes on only for
GPU runs: with ``use_cpu=True`` Accelerate's gloo group got torch's 30-minute default, so on CPU
the script creates the group itself first and Accelerate keeps it), ``--print-digest`` prints ``digest rank R
<blake2b of the parameters>`` at the end. Needs ``transformers`` and ``accelerate`` (checked
with transformers 5.24 and accelerate 1.16 on torch 2.15).
"""

from __future__ import annotations

import argparse
import datetime
import os
import tempfile

import torch
import torch.distributed as dist
from torch.utils.data import Dataset

from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments
from transformers.utils import logging as hf_logging

from ddp_common import nanchaos, parameter_digest

VOCAB, CONTEXT = 96, 32


class PatternTokens(Dataset):
    """``samples`` windows of CONTEXT tokens from a repeating pattern with 10% random tokens."""

    def __init__(self, samples: int) -> None:
        g = torch.Generator().manual_seed(4321)
        stream = torch.arange(samples + CONTEXT) * 7 % VOCAB
        noise = torch.rand(stream.shape, generator=g) < 0.1
        stream[noise] = torch.randint(0, VOCAB, (int(noise.sum()),), generator=g)
        self.stream, self.samples = stream, samples

    def __len__(self) -> int:
        return self.samples

    def __getitem__(self, i: int):
        ids = self.stream[i:i + CONTEXT]
        return {"input_ids": ids, "labels": ids.clone()}


class CheckedTrainer(Trainer):
    """``Trainer`` with the ``--stack`` check after each micro-batch's backward."""

    def __init__(self, *args, stack: str = "none", **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.stack = stack

    def training_step(self, model, inputs, *args, **kwargs):
        loss = super().training_step(model, inputs, *args, **kwargs)
        if self.stack == "none":
            return loss
        bad_here = not bool(torch.isfinite(loss))
        flag = torch.tensor([float(bad_here)])
        if dist.is_available() and dist.is_initialized():
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        if flag.item() == 0:
            return loss
        step = self.state.global_step
        if bad_here:
            nanchaos.report_detection("nan_check", cause="loss_math", step=step)
        if self.stack == "abort":
            nanchaos.report_decision("abort", step=step)
            raise FloatingPointError(f"non-finite loss at step {step}")
        nanchaos.report_decision("skip_step", step=step)
        model.zero_grad(set_to_none=True)
        return loss.detach().new_zeros(())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--stack", choices=["none", "skip", "abort"], default="skip")
    p.add_argument("--max-steps", type=int, default=20)
    p.add_argument("--n-layer", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--pg-timeout-s", type=int, default=10)
    p.add_argument("--print-digest", action="store_true")
    args = p.parse_args()
    if "OMP_NUM_THREADS" not in os.environ:
        torch.set_num_threads(1)
    hf_logging.set_verbosity_error()
    config = GPT2Config(vocab_size=VOCAB, n_positions=CONTEXT, n_embd=64, n_layer=args.n_layer,
                        n_head=4, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    torch.manual_seed(0)
    model = GPT2LMHeadModel(config)
    if int(os.environ.get("WORLD_SIZE", "1")) > 1 and not dist.is_initialized():
        dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=args.pg_timeout_s))
    out = tempfile.mkdtemp(prefix="hf-trainer-")
    training_args = TrainingArguments(
        output_dir=out, max_steps=args.max_steps, per_device_train_batch_size=args.batch_size,
        learning_rate=args.lr, warmup_steps=2, lr_scheduler_type="cosine", weight_decay=0.01,
        max_grad_norm=1.0, logging_steps=5, save_strategy="no", report_to="none",
        use_cpu=True, ddp_backend="gloo", ddp_timeout=args.pg_timeout_s,
        dataloader_num_workers=0, disable_tqdm=True, seed=0)
    trainer = CheckedTrainer(model=model, args=training_args,
                             train_dataset=PatternTokens(args.max_steps * args.batch_size * 4),
                             stack=args.stack)
    trainer.train()
    if args.print_digest:
        print(f"digest rank {training_args.process_index} {parameter_digest(model)}", flush=True)


if __name__ == "__main__":
    main()
