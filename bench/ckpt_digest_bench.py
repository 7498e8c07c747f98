#!/usr/bin/env python3
"""What the agent's per-tensor checkpoint digests cost (inject/python/nanchaos/ckpt_io.py
``tensor_digest``: CRC-32 of each tensor's bytes) next to the save they ride on.

One process, CPU, no harness: a model + Adam state of ``--mb`` MiB of float32 in ``--tensors``
tensors (training state as a job saves it: ``{"model", "optimizer", "step"}``) is

* digested (``ckpt_io.state_digests``, what a ``ckpt_save`` / ``ckpt_load`` event carries),
* ``torch.save``d to a file in ``--dir`` (default: a temporary folder),
* saved with ``torch.distributed.checkpoint`` (torch >= 2.2, one process: ``no_dist=True``), its
  digests through ``dcp_io.named_tensors`` as the DCP wrapper computes them,

each ``--repeat`` times; the median of each is reported, in ms, with the digests' share of the
save. Output: one JSON object on stdout.

    /usr/bin/python3 bench/ckpt_digest_bench.py --mb 128
    /opt/nanchaos/venv-torch2/bin/python bench/ckpt_digest_bench.py --mb 128
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import warnings

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "inject",
                                "python"))


def median_ms(fn, repeat: int) -> float:
    out = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1000.0)
    return statistics.median(out)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mb", type=int, default=128, help="MiB of float32 state in all")
    p.add_argument("--tensors", type=int, default=48)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--dir", default="")
    args = p.parse_args()

    import torch

    from nanchaos import ckpt_io, dcp_io

    torch.set_num_threads(1)
    per = args.mb * (1 << 20) // 4 // args.tensors
    third = args.tensors // 3
    model = {f"layers.{i}.weight": torch.randn(per) for i in range(third)}
    state = {i: {"exp_avg": torch.randn(per), "exp_avg_sq": torch.rand(per)}
             for i in range(third)}
    obj = {"model": model, "optimizer": {"state": state, "param_groups": []}, "step": 1}
    nbytes = sum(t.numel() * 4 for _, t in ckpt_io._named_tensors(obj))
    folder = args.dir or tempfile.mkdtemp(prefix="ckpt-digest-bench-")
    path = os.path.join(folder, "state.pt")
    res = {"torch": torch.__version__, "mb": round(nbytes / (1 << 20), 1),
           "tensors": len(ckpt_io._named_tensors(obj)), "dir": folder}
    res["digest_ms"] = median_ms(lambda: ckpt_io.state_digests(obj), args.repeat)
    res["torch_save_ms"] = median_ms(lambda: torch.save(obj, path), args.repeat)
    res["digest_gib_s"] = round(nbytes / (1 << 30) / (res["digest_ms"] / 1000.0), 2)
    res["digest_share_of_torch_save"] = round(res["digest_ms"] / res["torch_save_ms"], 3)
    try:
        import torch.distributed.checkpoint as dcp

        has_dcp = hasattr(dcp, "save")
    except ImportError:
        has_dcp = False
    if has_dcp:
        warnings.simplefilter("ignore")
        n = [0]

        def dcp_save():
            n[0] += 1
            dcp.save(obj, checkpoint_id=os.path.join(folder, f"dcp-{n[0]}"), no_dist=True)

        res["dcp_save_ms"] = median_ms(dcp_save, args.repeat)
        res["dcp_digest_ms"] = median_ms(
            lambda: ckpt_io.digests(dcp_io.named_tensors(obj)), args.repeat)
        res["digest_share_of_dcp_save"] = round(res["dcp_digest_ms"] / res["dcp_save_ms"], 3)
    for k, v in list(res.items()):
        if k.endswith("_ms"):
            res[k] = round(v, 1)
    print(json.dumps(res))
    if not args.dir:
        import shutil

        shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
