#!/bin/sh
# A built-in job that crashed and resumed from its checkpoint ends bit-identical to one that never
# failed: the shipped scenario restart-crash-resume-from-checkpoint (read from the shipped run)
# against its clean twin (the same file without the fault and the relaunch, run here), rank by
# rank: params_hash and optim_hash of the `final` events must be equal. A resume that lost the
# optimizer state, the loss scaler, the LR position or the data position changes them.
# Usage: restart_bit_identical.sh NANCHAOS SOURCE_DIR SHIPPED_RUN OUT_DIR
set -eu
bin=$1 src=$2 shipped=$3 out=$4
name=restart-crash-resume-from-checkpoint
resumed=$shipped/$name
[ -f "$resumed/events/rank-0.jsonl" ] || { echo "no shipped run of $name in $shipped"; exit 1; }
rm -rf "$out" && mkdir -p "$out"
# The clean twin: no [[fault]], no relaunch, no [expect] of them.
python3 - "$src/scenarios/$name.toml" "$out/clean.toml" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
text = re.sub(r"(?ms)^\[\[fault\]\].*?(?=^\[)", "", text)
text = re.sub(r"(?m)^(restarts|resumed_from_step|outcome) = .*\n", "", text)
text = text.replace('name = "restart-crash-resume-from-checkpoint"', 'name = "clean-twin"')
open(sys.argv[2], "w").write(text + "detected = false\n")
PY
"$bin" run "$out/clean.toml" --out "$out/run" --quiet
python3 - "$resumed" "$out/run/clean-twin" <<'PY'
import json, sys
def finals(d):
    out = {}
    for r in (0, 1):
        for line in open(f"{d}/events/rank-{r}.jsonl"):
            e = json.loads(line)
            if e.get("ev") == "final":
                out[r] = (e["params_hash"], e["optim_hash"])
    return out
a, b = finals(sys.argv[1]), finals(sys.argv[2])
loads = [json.loads(l) for l in open(f"{sys.argv[1]}/events/rank-0.jsonl") if '"ckpt_load"' in l]
assert loads and loads[0]["step"] == 6, f"the resumed launch loaded {loads}"
assert len(a) == 2 and a == b, f"resumed {a} != clean {b}"
print(f"resumed from step 6, final digests equal the clean run's on both ranks: {a[0]}")
PY
