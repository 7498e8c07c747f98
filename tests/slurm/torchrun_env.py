"""Records the torchrun variables (and Slurm's) this rank was given, then runs a script as
`python3 SCRIPT ARGS...` would: tests/slurm/ddp-env.toml's command, read by slurm_test.py."""

import json
import os
import runpy
import sys

KEYS = ["RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
        "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NODEID", "SLURMD_NODENAME",
        "SLURM_STEP_NODELIST", "SLURM_STEP_TASKS_PER_NODE"]
with open(os.path.join(os.environ["NANCHAOS_RUN_DIR"], f"torchrun-env-{os.environ['RANK']}.json"),
          "w") as f:
    json.dump({k: os.environ.get(k) for k in KEYS}, f)
sys.argv = sys.argv[1:]
sys.path[0] = os.path.dirname(os.path.abspath(sys.argv[0]))  # as `python3 SCRIPT` sets it
runpy.run_path(sys.argv[0], run_name="__main__")
