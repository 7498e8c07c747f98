#!/usr/bin/env bash
# A campaign on an external job (issue 16 point 2): examples/pytorch/train_ddp.py --stack synced
# (scenarios/pytorch/pytorch-synced-loss-nan-rank1.toml as the job and stack), 4 faults of
# seed 3 over tensor, batch and lr, two launches at a time. External jobs run one launch per
# fault: every fault folder must hold its own evidence (plan.json from the Python agent's
# attach, events, ranks.log), every row must be measured (no error row), every tensor fault's
# target must be one the job's attach listed (the `start` event's modules and parameters), and
# what was named must come from the job's own
# stack (its detector names, not the reference stack's).
# Usage: campaign_external_check.sh NANCHAOS_BINARY SOURCE_DIR OUT_DIR PYTHON
set -uo pipefail
bin=$1 src=$2 out=$3 py=$4
rm -rf "$out"
mkdir -p "$(dirname "$out")"
start=$(date +%s)
"$bin" campaign "$src/scenarios/pytorch/pytorch-synced-loss-nan-rank1.toml" --faults 4 --seed 3 \
  --jobs 2 --kinds tensor,batch,lr --quiet --out "$out"
rc=$?
echo "campaign: exit $rc after $(( $(date +%s) - start )) s"
[ "$rc" -eq 0 ] || { echo "FAIL: the external campaign exited $rc, want 0"; exit 1; }
"$py" - "$out" <<'PY'
import json, os, sys
out = sys.argv[1]
c = json.load(open(os.path.join(out, "campaign.json")))
fail = []
rows = c["faults"]
if len(rows) != 4:
    fail.append(f"{len(rows)} rows, want 4")
if os.path.exists(os.path.join(out, "launches")):
    fail.append("launches/ exists: an external job must run one launch per fault")
reference = {"batch", "loss", "grad", "post_reduce", "watchdog", "replica", "param", "activation"}
for r in rows:
    i = r["index"]
    d = os.path.join(out, "faults", f"{i:03d}")
    if r.get("error") or r.get("outcome") is None:
        fail.append(f"fault {i}: not measured: {r.get('error')}")
    for f in ("plan.json", "ranks.log", "scenario.toml", "events/rank-0.jsonl", "events/rank-1.jsonl"):
        if not os.path.exists(os.path.join(d, f)):
            fail.append(f"fault {i}: {f} missing")
    target = r["fault"].get("target")
    log = os.path.join(d, "events", "rank-0.jsonl")
    if target and ":" in target and os.path.exists(log):
        where, name = target.split(":", 1)
        start = next((e for e in map(json.loads, open(log)) if e.get("ev") == "start"), {})
        attached = start.get("modules", []) + start.get("parameters", []) + ["loss", "inputs", "labels"]
        if name not in attached:
            fail.append(f"fault {i}: target {target} is not one the job's attach listed")
    named = r.get("named")
    if named and named["detector"] in reference:
        fail.append(f"fault {i}: named by {named['detector']}, a reference-stack detector")
if not any(r.get("named") for r in rows):
    fail.append("no fault was named: the job's own checks never reached the campaign")
for f in fail:
    print("FAIL:", f)
print(f"{len(rows)} rows, outcomes {c['summary']['outcomes']}, named by "
      f"{sorted({r['named']['detector'] for r in rows if r.get('named')})}")
sys.exit(1 if fail else 0)
PY
