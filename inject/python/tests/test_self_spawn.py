"""Scripts that start their own ranks: ``torch.multiprocessing.spawn`` or
``start_processes`` in the process the harness launched is refused at the call, before any child
starts, with the reason (an ``attach_error``, the verdict's reason) instead of the children
training unobserved and the run ending in "the agent loaded but never attached to a model"."""

from __future__ import annotations

import textwrap

import pytest

from ranks import run_ranks
from test_agent import HEADER, plan

SELF_SPAWNING = HEADER + textwrap.dedent('''
    import torch.multiprocessing as mp
    def train(local_rank, world):
        print("child started", local_rank, flush=True)
        os.environ.update(RANK=str(local_rank), WORLD_SIZE=str(world))
        dist.init_process_group("gloo")
        model = DDP(Net())
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        for step in range(STEPS):
            opt.zero_grad()
            F.cross_entropy(model(torch.randn(4, 8)), torch.randint(0, 4, (4,))).backward()
            opt.step()
        dist.destroy_process_group()
    if __name__ == "__main__":
        API = sys.argv[1]
        if API == "spawn":
            mp.spawn(train, args=(2,), nprocs=2)
        else:
            mp.start_processes(train, args=(2,), nprocs=2, start_method="spawn")
        print("parent done", flush=True)
''')


@pytest.mark.parametrize("api", ["spawn", "start_processes"])
def test_a_job_that_spawns_its_own_ranks_is_refused_at_the_spawn(tmp_path, api):
    job = run_ranks(tmp_path, SELF_SPAWNING, plan(), world=1, args=(api,), timeout=120)
    out = job.outputs[0]
    assert job.codes[0] not in (0, None), out
    assert "child started" not in out and "parent done" not in out, out
    errors = job.of(0, "attach_error")
    assert len(errors) == 1, job.events[0]
    reason = errors[0]["reason"]
    assert reason.startswith(f"this job starts its own ranks with torch.multiprocessing.{api}"
                             "(nprocs=2); nanchaos starts every rank itself"), reason
    assert "call the rank function directly when RANK is set" in reason
    assert "AttachError: nanchaos: this job starts its own ranks" in out


def test_a_rank_that_already_trains_may_start_helper_processes(tmp_path):
    script = HEADER + textwrap.dedent('''
        import torch.multiprocessing as mp
        def helper(i):
            pass
        if __name__ == "__main__":
            model = Net()
            opt = torch.optim.SGD(model.parameters(), lr=0.05)
            for step in range(STEPS):
                opt.zero_grad()
                F.cross_entropy(model(torch.randn(4, 8)), torch.randint(0, 4, (4,))).backward()
                opt.step()
                if step == 1:
                    mp.spawn(helper, nprocs=1)
    ''')
    job = run_ranks(tmp_path, script, plan(), world=1, timeout=120)
    assert job.codes == [0], job.outputs
    assert job.of(0, "attach_error") == []
    assert len(job.of(0, "step_end")) == 6
