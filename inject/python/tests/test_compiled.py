"""``torch.compile`` under the agent (nanchaos/compiled.py).

A small DDP model (gloo) compiled every way jobs do it: ``torch.compile(DDP(m))``,
``DDP(torch.compile(m))``, ``torch.compile(m)`` alone, ``m.compile()``, a compiled submodule, each
block compiled on its own (several ``torch.compile`` calls), and a root compiled and run once
before the optimizer exists (so the agent's hooks arrive after the first compiled call, which
dynamo ignores by default); ``fullgraph=True``. What must hold: the agent attaches to the
user's module, counts every step, and an ``activation:`` fault inside the compiled region changes
the compiled output exactly as it changes the eager one (the fault picks its elements as a pure
function of seed, step, rank and element count, rng.py), on inductor (the default backend, C++ on
CPU) and on ``aot_eager``, or is refused at attach where ``fullgraph=True`` forbids the graph
break its hook needs; a missing C++ compiler is reported at the ``torch.compile`` call.
Skipped where torch has no usable ``torch.compile`` (< 2.4, Debian's 1.13).
"""

from __future__ import annotations

import json
import math
import textwrap

import pytest
import torch

from ranks import run_ranks
from test_agent import plan, steps_of


def _version() -> tuple:
    parts = torch.__version__.split("+")[0].split(".")
    return tuple(int(p) for p in parts[:2] if p.isdigit())


pytestmark = pytest.mark.skipif(
    _version() < (2, 4),
    reason=f"torch.compile under the agent needs torch >= 2.4; this is torch {torch.__version__}")

COMPILED_JOB = textwrap.dedent('''
    import json, os, sys, torch, torch.nn as nn, torch.nn.functional as F
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    MODE, BACKEND = sys.argv[1], sys.argv[2]
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 16), nn.GELU())
            self.head = nn.Linear(16, 4)
        def forward(self, x):
            return self.head(self.layers(x))
    net = Net()
    comp = lambda m: torch.compile(m, backend=BACKEND)
    if MODE == "eager":
        model = DDP(net)
    elif MODE == "compile-ddp":
        model = comp(DDP(net))
    elif MODE == "ddp-compile":
        model = DDP(comp(net))
    elif MODE == "compile-root":
        model = comp(net)
    elif MODE == "compile-root-fullgraph":
        model = torch.compile(net, backend=BACKEND, fullgraph=True)
    elif MODE == "module-compile":
        net.compile(backend=BACKEND)
        model = net
    elif MODE == "compile-sub":
        net.layers = comp(net.layers)
        model = DDP(net)
    elif MODE == "compile-blocks":  # torchtitan: each block on its own (several compile calls)
        for i in range(len(net.layers)):
            net.layers[i] = comp(net.layers[i])
        model = DDP(net)
    elif MODE == "warm-before-optimizer":  # a compiled training forward before the agent's hooks
        model = comp(net)
        model(torch.zeros(2, 8)).sum().backward()
        net.zero_grad()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(100 + rank)
    for step in range(4):
        x = torch.randn(16, 8, generator=g); y = torch.randint(0, 4, (16,), generator=g)
        opt.zero_grad()
        out = model(x)
        print("OUT " + json.dumps([step, out.detach().flatten().tolist()]), flush=True)
        if MODE != "eager":  # frames dynamo compiled so far (a recompile adds one)
            from torch._dynamo.utils import counters
            print("FRAMES " + json.dumps([step, sum(counters["frames"].values())]), flush=True)
        loss = F.cross_entropy(out, y)
        if torch.isfinite(loss):
            loss.backward()
            opt.step()
    dist.destroy_process_group()
''')

#: A factor on three elements of layers.0's output at step 2 (finite: values can be compared),
#: and a NaN into layers.2's output at step 3 on rank 0.
FAULTS = [
    {"kind": "tensor", "ranks": [0], "step": 2,
     "params": {"target": "activation:layers.0", "factor": 50.0, "count": 3}},
    {"kind": "tensor", "ranks": [0], "step": 3,
     "params": {"target": "activation:layers.2", "value": "nan", "count": 1}},
]


def _outputs(job, rank: int = 0) -> dict:
    out = {}
    for line in job.outputs[rank].splitlines():
        if line.startswith("OUT "):
            step, values = json.loads(line[4:])
            out[step] = torch.tensor([float(v) for v in values])
    return out


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal up to the float reordering compiled kernels do; NaN exactly where the other has."""
    return bool(torch.equal(torch.isnan(a), torch.isnan(b))
                and torch.allclose(a, b, rtol=1e-4, atol=1e-5, equal_nan=True))


def _run(tmp_path, mode: str, backend: str, faults=FAULTS, env=None):
    job = run_ranks(tmp_path / mode, COMPILED_JOB, plan(steps=4, faults=faults), world=1,
                    args=(mode, backend), timeout=300, env=env)
    return job


@pytest.fixture(scope="module")
def eager_injected(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("eager")
    (tmp / "eager").mkdir()
    job = _run(tmp, "eager", "eager")
    assert job.codes == [0], job.outputs
    return _outputs(job)


def _check(job, eager: dict) -> None:
    assert job.codes == [0], job.outputs
    assert not job.of(0, "attach_error"), job.of(0, "attach_error")
    assert [s for s, _ in steps_of(job, 0)] == [0, 1, 2, 3]
    got = [(i["target"], i["step"]) for i in job.of(0, "inject")]
    assert got == [("activation:layers.0", 2), ("activation:layers.2", 3)]
    out = _outputs(job)
    assert sorted(out) == [0, 1, 2, 3]
    for step in range(4):
        assert _same(out[step], eager[step]), (step, out[step], eager[step])
    assert torch.isfinite(out[2]).all() and torch.isnan(out[3]).any()


@pytest.mark.parametrize("mode", ["compile-ddp", "ddp-compile", "compile-root", "module-compile",
                                  "compile-sub", "compile-blocks",
                                  "warm-before-optimizer"])
def test_activation_faults_change_the_compiled_output_as_in_eager(tmp_path, eager_injected, mode):
    (tmp_path / mode).mkdir()
    job = _run(tmp_path, mode, "aot_eager")
    _check(job, eager_injected)
    start = job.of(0, "start")[0]
    assert "layers.0" in start["modules"] and "layers.0.weight" in start["parameters"]
    assert not any("_orig_mod" in n for n in start["parameters"])


def test_inductor_compiled_output_equals_the_eager_injected_output(tmp_path, eager_injected):
    """The default backend: generated C++ kernels on CPU (needs g++), ``torch.compile(DDP(m))``."""
    (tmp_path / "compile-ddp").mkdir()
    job = _run(tmp_path, "compile-ddp", "inductor")
    _check(job, eager_injected)


def _frames(job) -> list:
    return [json.loads(ln[7:])[1] for ln in job.outputs[0].splitlines() if ln.startswith("FRAMES ")]


def test_agent_state_never_becomes_a_guard(tmp_path, eager_injected):
    """The step clock and fault hooks run eagerly (graph breaks), never traced: were they traced,
    the step counter and the open-iteration flags would be guards and every step would
    recompile (then fall back to eager at dynamo's cache limit). Frames compiled after step 1
    (attach, the hooks' first calls) stay the same through the faulted steps."""
    (tmp_path / "compile-ddp").mkdir()
    job = _run(tmp_path, "compile-ddp", "aot_eager")
    assert job.codes == [0], job.outputs
    frames = _frames(job)
    assert len(frames) == 4 and frames[1] == frames[2] == frames[3], frames


def test_clean_compiled_run_changes_nothing(tmp_path, eager_injected):
    (tmp_path / "compile-ddp").mkdir()
    job = _run(tmp_path, "compile-ddp", "aot_eager", faults=())
    assert job.codes == [0], job.outputs
    assert steps_of(job, 0) == [(s, "update") for s in range(4)]
    out = _outputs(job)
    assert _same(out[0], eager_injected[0]) and _same(out[1], eager_injected[1])
    assert not _same(out[2], eager_injected[2])  # the eager run's step 2 was injected
    assert all(math.isfinite(v) for v in out[3].tolist())


def test_fullgraph_root_counts_steps_and_refuses_activation_faults_inside_it(tmp_path):
    """fullgraph=True forbids the graph break an activation hook needs: the fault is refused at
    attach with the reason (not left for dynamo to fail at the first compiled call); the step
    clock still works (it runs outside the compiled frame)."""
    (tmp_path / "compile-root-fullgraph").mkdir()
    clean = _run(tmp_path, "compile-root-fullgraph", "aot_eager", faults=())
    assert clean.codes == [0], clean.outputs
    assert steps_of(clean, 0) == [(s, "update") for s in range(4)]
    job = _run(tmp_path, "compile-root-fullgraph", "aot_eager")
    assert job.codes[0] != 0
    errs = job.of(0, "attach_error")
    assert errs, job.outputs
    assert "activation:layers.0 runs inside torch.compile(..., fullgraph=True)" in errs[0]["reason"]
    assert job.of(0, "inject") == []


def test_missing_cxx_compiler_fails_at_torch_compile_naming_the_cause(tmp_path):
    (tmp_path / "compile-ddp").mkdir()
    bare = tmp_path / "bin"
    bare.mkdir()
    env = {"PATH": str(bare), "CXX": str(tmp_path / "no-such-g++"),
           "CONDA_EXE": str(tmp_path / "no-such-conda")}
    job = _run(tmp_path, "compile-ddp", "inductor", env=env)
    assert job.codes[0] != 0
    errs = job.of(0, "attach_error")
    assert errs and "needs a C++ compiler" in errs[0]["reason"], job.outputs
    assert "no-such-g++" in errs[0]["reason"] and "apt-get install g++" in errs[0]["reason"]
    assert "needs a C++ compiler" in job.outputs[0]


FSDP2_COMPILED_JOB = textwrap.dedent('''
    import json, sys, torch, torch.nn as nn, torch.nn.functional as F
    import torch.distributed as dist
    try:
        from torch.distributed.fsdp import fully_shard
    except ImportError:
        from torch.distributed._composable.fsdp import fully_shard
    MODE, BACKEND = sys.argv[1], sys.argv[2]
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(8, 8)
            self.act = nn.GELU()
        def forward(self, x):
            return x + self.act(self.fc(x))
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = nn.ModuleList(Block() for _ in range(2))
            self.head = nn.Linear(8, 4)
        def forward(self, x):
            for b in self.blocks:
                x = b(x)
            return self.head(x)
    net = Net()
    comp = lambda m: torch.compile(m, backend=BACKEND)
    if MODE == "compile-blocks-fsdp":  # torchtitan: each block compiled, then fully_shard
        for i in range(len(net.blocks)):
            net.blocks[i] = comp(net.blocks[i])
    for b in net.blocks:
        fully_shard(b)
    fully_shard(net)
    model = comp(net) if MODE == "compile-fsdp" else net
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, foreach=True)
    g = torch.Generator().manual_seed(100 + rank)
    for step in range(4):
        x = torch.randn(16, 8, generator=g); y = torch.randint(0, 4, (16,), generator=g)
        out = model(x)
        print("OUT " + json.dumps([step, out.detach().flatten().tolist()]), flush=True)
        if step == 3:  # the NaN step: no backward (FSDP's would need every rank)
            break
        F.cross_entropy(out, y).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    dist.destroy_process_group()
''')

#: On rank 1 of two FSDP2 ranks: a factor on three elements of blocks.0.fc's output at step 2,
#: a NaN into blocks.1.fc's at step 3 (both modules inside a compiled region).
FSDP2_FAULTS = [
    {"kind": "tensor", "ranks": [1], "step": 2,
     "params": {"target": "activation:blocks.0.fc", "factor": 50.0, "count": 3}},
    {"kind": "tensor", "ranks": [1], "step": 3,
     "params": {"target": "activation:blocks.1.fc", "value": "nan", "count": 1}},
]


def _has_fsdp2() -> bool:
    try:
        from torch.distributed.fsdp import fully_shard  # noqa: F401
        return True
    except Exception:
        try:
            from torch.distributed._composable.fsdp import fully_shard  # noqa: F401
            return True
        except Exception:
            return False


def _run_fsdp2(tmp_path, mode: str):
    (tmp_path / mode).mkdir()
    job = run_ranks(tmp_path / mode, FSDP2_COMPILED_JOB, plan(steps=4, faults=FSDP2_FAULTS),
                    world=2, args=(mode, "aot_eager"), timeout=300)
    assert job.codes == [0, 0], job.outputs
    assert not job.of(0, "attach_error") and not job.of(1, "attach_error")
    assert [(i["target"], i["step"]) for i in job.of(1, "inject")] == [
        ("activation:blocks.0.fc", 2), ("activation:blocks.1.fc", 3)]
    assert job.of(0, "inject") == []
    return job


@pytest.fixture(scope="module")
def fsdp2_eager_injected(tmp_path_factory):
    job = _run_fsdp2(tmp_path_factory.mktemp("fsdp2"), "eager")
    return [_outputs(job, r) for r in range(2)]


@pytest.mark.skipif(not _has_fsdp2(), reason=f"FSDP2 needs torch >= 2.4; this is torch "
                                             f"{torch.__version__}")
@pytest.mark.parametrize("mode", ["compile-blocks-fsdp", "compile-fsdp"])
def test_fsdp2_compiled_output_equals_the_eager_injected_output(tmp_path, fsdp2_eager_injected,
                                                                mode):
    """torch.compile with FSDP2: each block compiled before ``fully_shard`` (torchtitan's order)
    or the ``fully_shard``-ed root compiled. The activation faults inside the compiled region
    change rank 1's compiled output as they change the eager one; rank 0's never sees them in
    its forward (an activation is local)."""
    eager = fsdp2_eager_injected
    job = _run_fsdp2(tmp_path, mode)
    start = job.of(1, "start")[0]
    assert "blocks.0.fc" in start["modules"] and "blocks.0.fc.weight" in start["parameters"]
    assert not any("_orig_mod" in n for n in start["parameters"])
    for r in range(2):
        out = _outputs(job, r)
        assert sorted(out) == [0, 1, 2, 3]
        for step in range(4):
            assert _same(out[step], eager[r][step]), (r, step, out[step], eager[r][step])
    out1, out0 = _outputs(job, 1), _outputs(job, 0)
    assert torch.isnan(out1[3]).any() and torch.isfinite(out0[3]).all()
    assert torch.isfinite(out1[2]).all()
