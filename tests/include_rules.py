#!/usr/bin/env python3
"""Who may include whom: the parts of docs/architecture.md, checked on every quoted include.

Usage: include_rules.py SOURCE_DIR | --self-test

Each source file belongs to the part its folder names (PARTS below). A file may include headers of
its own part and of the parts ALLOWED lists for it; anything else is printed as
`file:line: <part> may not include <header> (<part>)` and the script exits 1. Torch-free parts may
not include <torch/...> or a header of a torch part. Exits 2 on a file that belongs to no part
(a new folder must be given its part here and in docs/architecture.md).

The rules come from ../shared/ARCHITECTURE_TARGET.md: the agent knows nothing of the stack, the
stack nothing of what was injected, the controller never links the rank loop, the stack or the
scans, and results read the typed evidence, never the rank's internals. And, transitively: the
stack (detectors/) and the agents' detection paths (inject/observe.*) reach no header that
declares the plan (PLAN_HEADERS); `--self-test` checks that rule on a made-up tree.
"""
import pathlib
import re
import sys

# Folder prefix -> part (the longest prefix wins).
PARTS = {
    "harness/cli/": "cli",
    "harness/scenario/": "scenario",
    "harness/controller/": "controller",
    "harness/evidence/": "evidence",
    "harness/job/": "job",
    "harness/comm/": "comm",
    "harness/common/": "common",
    "harness/tensor/": "tensor",
    "inject/": "agent",
    "detectors/": "stack",
    "results/": "results",
    "nanchaos/": "common",  # the generated config header
}

# Part -> the other parts it may include (its own part is always allowed).
ALLOWED = {
    "cli": {"controller", "job", "scenario", "results", "evidence", "common", "tensor", "agent",
            "stack", "comm"},
    "controller": {"scenario", "results", "evidence", "common"},
    "job": {"agent", "stack", "comm", "evidence", "scenario", "common", "tensor"},
    "agent": {"evidence", "scenario", "common", "tensor"},
    "stack": {"comm", "evidence", "scenario", "common", "tensor"},
    "results": {"evidence", "scenario", "common"},
    "comm": {"evidence", "common"},
    "scenario": {"common"},
    "evidence": {"common"},
    "common": set(),
    "tensor": {"common"},
}

# Parts whose code may use LibTorch. Everything else is linked into the torch-free controller and
# the libFuzzer builds.
TORCH_PARTS = {"cli", "job", "agent", "stack", "tensor"}
# The stack's shared machinery (consensus, replica vote, scans, digests) is torch-free and linked
# into the controller's core too; the detectors themselves and half_round.h use LibTorch.
STACK_TORCH_FREE = "detectors/core/"

INCLUDE = re.compile(r'^\s*#\s*include\s+([<"])([^">]+)[">]')

# The stack under test and the agents' detection paths never see the plan (../shared/DESIGN.md:
# the stack never reads the ground truth): from these files no chain of quoted includes may reach
# a header that declares a fault, an expectation or the whole scenario. They are built from
# StackConfig (harness/scenario/stack_config.h), which holds none, and declare keys with
# key_builder.h.
PLAN_BLIND = ("detectors/", "inject/observe.")
PLAN_HEADERS = {
    "harness/scenario/scenario.h",         # Scenario, FaultSpec, ExpectConfig
    "harness/scenario/registry.h",         # FaultKindInfo (FaultSpec, Scenario)
    "harness/scenario/plan.h",             # the plan JSON the agents read
    "harness/scenario/scenario_schema.h",  # includes scenario.h
    "harness/scenario/loader.h",
    "harness/scenario/model_spec.h",
    "inject/faults.h",                     # the injectors, built from the plan
    "inject/injector.h",
    "inject/agent.h",
}


def part_of(path):
    best = None
    for prefix, part in PARTS.items():
        if path.startswith(prefix) and (best is None or len(prefix) > len(best[0])):
            best = (prefix, part)
    return best[1] if best else None


def torch_free(path, part):
    """True where the file is compiled into the torch-free core."""
    if part == "stack":
        return path.startswith(STACK_TORCH_FREE) and not path.endswith(("half_round.h",))
    return part not in TORCH_PARTS


def quoted_includes(root, rel, cache):
    """The repository headers `rel` includes with quotes, as (line, header) pairs."""
    if rel not in cache:
        out = []
        path = root / rel
        if path.is_file():
            for n, line in enumerate(path.read_text().splitlines(), 1):
                m = INCLUDE.match(line)
                if m and m.group(1) == '"' and (root / m.group(2)).is_file():
                    out.append((n, m.group(2)))
        cache[rel] = out
    return cache[rel]


def plan_reach(root, rel, cache):
    """The first chain of includes from `rel` to a PLAN_HEADERS header, or None."""
    seen = {rel}
    todo = [(rel, [rel])]
    while todo:
        cur, chain = todo.pop(0)
        for _, header in quoted_includes(root, cur, cache):
            if header in seen:
                continue
            seen.add(header)
            if header in PLAN_HEADERS:
                return chain + [header]
            todo.append((header, chain + [header]))
    return None


def check_plan_blind(root, files):
    cache = {}
    errors = []
    for rel in files:
        if rel.startswith(PLAN_BLIND):
            chain = plan_reach(root, rel, cache)
            if chain:
                errors.append(f"{rel}: reaches the plan: {' -> '.join(chain)}")
    return errors


def self_test():
    """The transitive check on a made-up tree: a detector that reaches scenario.h through a
    helper header is caught; one that includes stack_config.h only is not."""
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        t = pathlib.Path(d)
        files = {
            "harness/scenario/scenario.h": "",
            "harness/scenario/stack_config.h": '#include "harness/scenario/keys.h"\n',
            "harness/scenario/keys.h": "",
            "detectors/core/helper.h": '#include "harness/scenario/scenario.h"\n',
            "detectors/bad.cpp": '#include "detectors/core/helper.h"\n',
            "detectors/good.cpp": '#include "harness/scenario/stack_config.h"\n',
        }
        for rel, text in files.items():
            (t / rel).parent.mkdir(parents=True, exist_ok=True)
            (t / rel).write_text(text)
        errs = check_plan_blind(t, sorted(files))
        want = ["detectors/bad.cpp: reaches the plan: detectors/bad.cpp -> "
                "detectors/core/helper.h -> harness/scenario/scenario.h",
                "detectors/core/helper.h: reaches the plan: detectors/core/helper.h -> "
                "harness/scenario/scenario.h"]
        if errs != want:
            print("self-test failed:", errs)
            return 1
    print("self-test passed")
    return 0


def main():
    if sys.argv[1:2] == ["--self-test"]:
        return self_test()
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve()
    errors = []
    unowned = []
    owned = []
    for folder in ("harness", "inject", "detectors", "results"):
        for f in sorted((root / folder).rglob("*")):
            if f.suffix not in (".h", ".cpp", ".cu") or not f.is_file():
                continue
            rel = f.relative_to(root).as_posix()
            part = part_of(rel)
            if part is None:
                unowned.append(rel)
                continue
            owned.append(rel)
            for n, line in enumerate(f.read_text().splitlines(), 1):
                m = INCLUDE.match(line)
                if not m:
                    continue
                kind, header = m.groups()
                if kind == "<":
                    if header.startswith("torch/") and torch_free(rel, part):
                        errors.append(f"{rel}:{n}: {part} is torch-free and may not include "
                                      f"<{header}>")
                    continue
                target = part_of(header)
                if target is None:
                    errors.append(f"{rel}:{n}: includes \"{header}\", which belongs to no part")
                    continue
                if target != part and target not in ALLOWED[part]:
                    errors.append(f"{rel}:{n}: {part} may not include {header} ({target})")
                elif torch_free(rel, part) and not torch_free(header, target):
                    errors.append(f"{rel}:{n}: {part} is torch-free and may not include "
                                  f"{header} ({target})")
    errors += check_plan_blind(root, owned)
    for rel in unowned:
        print(f"{rel}: belongs to no part (add its folder to PARTS in {sys.argv[0]})")
    for e in errors:
        print(e)
    if unowned:
        return 2
    if errors:
        return 1
    print(f"include rules hold ({len(PARTS)} folders, {len(ALLOWED)} parts)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
