"""The agent's observed:* detections (nanchaos/observe.py): what they report, and that the code
that reports them cannot reach the fault plan."""

import ast
import inspect
import json
import os

import nanchaos.observe as observe
from nanchaos.events import EventLog
from nanchaos.observe import Observer

PKG = os.path.dirname(os.path.abspath(observe.__file__))
# The modules that hold the plan or act on it: the detection path may import none of them.
PLAN_MODULES = {"plan", "faults", "agent", "_bootstrap", "fault_hooks", "attach_rules", "rng"}


def _local_imports(module_file):
    """The package-relative modules `module_file` imports (``from .x import y`` -> x)."""
    tree = ast.parse(open(module_file).read())
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level >= 1:
            out.add((node.module or "").split(".")[0])
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == "nanchaos":
                    out.add(a.name.split(".")[1] if "." in a.name else "__init__")
    return out


def _reachable(start):
    seen, todo = set(), [start]
    while todo:
        m = todo.pop()
        if m in seen:
            continue
        seen.add(m)
        path = os.path.join(PKG, m + ".py")
        if not os.path.exists(path):
            path = os.path.join(PKG, m, "__init__.py")
        todo.extend(_local_imports(path))
    return seen - {start}


def test_the_observer_reaches_no_plan_module():
    reach = _reachable("observe")
    assert reach == {"events"}, reach
    assert not (reach & PLAN_MODULES)


def test_the_observer_is_built_from_the_log_alone():
    params = list(inspect.signature(Observer.__init__).parameters)
    assert params == ["self", "log"]


def test_the_agent_writes_no_observed_detection_itself():
    # Every observed:* detection goes through the Observer: no call in agent.py passes an
    # observed:* detector name.
    tree = ast.parse(open(os.path.join(PKG, "agent.py")).read())
    written = [k.value.value for node in ast.walk(tree) if isinstance(node, ast.Call)
               for k in node.keywords
               if k.arg == "detector" and isinstance(k.value, ast.Constant)
               and str(k.value.value).startswith("observed:")]
    assert written == []


def _events(path):
    with open(path, "rb") as f:
        return [json.loads(ln) for ln in f.read().split(b"\n") if ln.strip(b"\0")]


def test_skip_backoff_and_exception_are_reported_as_seen(tmp_path):
    path = str(tmp_path / "rank-0.jsonl")
    log = EventLog(path, os.getpid())
    o = Observer(log)
    o.end_iteration(0, updated=True, scale=65536.0)
    o.end_iteration(1, updated=False, scale=32768.0)  # found_inf: skipped, scale halved
    o.end_iteration(2, updated=True, scale=32768.0)
    o.end_iteration(3, updated=True, scale=65536.0)  # growth is no detection
    o.exception(-1, "RuntimeError: boom")
    log.close()
    dets = [(e["detector"], e["step"]) for e in _events(path) if e["ev"] == "detect"]
    assert dets == [("observed:skip", 1), ("observed:scale_backoff", 1),
                    ("observed:exception", 0)]
    backoff = [e for e in _events(path) if e.get("detector") == "observed:scale_backoff"][0]
    assert backoff["scale"] == 32768.0 and backoff["previous_scale"] == 65536.0
    assert all(e.get("source") == "observed" for e in _events(path) if e["ev"] == "detect")
