#!/bin/sh
# A built-in job that crashed and resumed from its checkpoint ends bit-identical to one that never
# failed: the shipped scenario restart-crash-resume-from-checkpoint (read from the shipped run)
# against the clean reference run the harness made for its `final_matches_clean` (RUN/clean:
# the same scenario and seed with no fault), rank by rank: params_hash and optim_hash of the
# `final` events must be equal, and the check must say so. A resume that lost the optimizer
# state, the loss scaler, the LR position or the data position changes them.
# Usage: restart_bit_identical.sh NANCHAOS SOURCE_DIR SHIPPED_RUN OUT_DIR
set -eu
shipped=$3
name=restart-crash-resume-from-checkpoint
resumed=$shipped/$name
[ -f "$resumed/events/rank-0.jsonl" ] || { echo "no shipped run of $name in $shipped"; exit 1; }
[ -f "$resumed/clean/clean.json" ] || { echo "no clean reference run in $resumed/clean"; exit 1; }
python3 - "$shipped/report.json" "$resumed" <<'PY'
import json, sys
report, run = sys.argv[1], sys.argv[2]
def finals(d):
    out = {}
    for r in (0, 1):
        for line in open(f"{d}/events/rank-{r}.jsonl"):
            e = json.loads(line)
            if e.get("ev") == "final":
                out[r] = (e["params_hash"], e["optim_hash"])
            assert e.get("ev") != "inject" or "/clean" not in d, f"the clean run injected: {e}"
    return out
a, b = finals(run), finals(f"{run}/clean")
cached = json.load(open(f"{run}/clean/clean.json"))
assert [(r["params_hash"], r["optim_hash"]) for r in cached["ranks"]] == [b[0], b[1]], f"cache {cached} != {b}"
loads = [json.loads(l) for l in open(f"{run}/events/rank-0.jsonl") if '"ckpt_load"' in l]
assert loads and loads[0]["step"] == 6, f"the resumed launch loaded {loads}"
assert len(a) == 2 and a == b, f"resumed {a} != clean {b}"
sc = next(s for s in json.load(open(report))["scenarios"] if s["name"] == "restart-crash-resume-from-checkpoint")
check = next(c for c in sc["checks"] if c["key"] == "final_matches_clean")
assert check["pass"] and check["actual"] is True, check
print(f"resumed from step 6, final digests equal the clean run's on both ranks: {a[0]}")
PY
