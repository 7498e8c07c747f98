#!/usr/bin/env python3
"""Who may include whom: the parts of docs/architecture.md, checked on every quoted include.

Usage: include_rules.py SOURCE_DIR

Each source file belongs to the part its folder names (PARTS below). A file may include headers of
its own part and of the parts ALLOWED lists for it; anything else is printed as
`file:line: <part> may not include <header> (<part>)` and the script exits 1. Torch-free parts may
not include <torch/...> or a header of a torch part. Exits 2 on a file that belongs to no part
(a new folder must be given its part here and in docs/architecture.md).

The rules come from ../shared/ARCHITECTURE_TARGET.md: the agent knows nothing of the stack, the
stack nothing of what was injected, the controller never links the rank loop, the stack or the
scans, and results read the typed evidence, never the rank's internals.
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


def main():
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve()
    errors = []
    unowned = []
    for folder in ("harness", "inject", "detectors", "results"):
        for f in sorted((root / folder).rglob("*")):
            if f.suffix not in (".h", ".cpp", ".cu") or not f.is_file():
                continue
            rel = f.relative_to(root).as_posix()
            part = part_of(rel)
            if part is None:
                unowned.append(rel)
                continue
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
