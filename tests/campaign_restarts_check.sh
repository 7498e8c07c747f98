#!/usr/bin/env bash
# A small campaign on a job that relaunches ([job] restarts, [checkpoint]; the shipped scenario
# restart-crash-resume-from-checkpoint as the job), run twice with the same seed: the same rows
# (fault, truth, outcome, what the stack named), the checkpoint faults drawn with their crash
# and detected by the checkpoint loader, crash faults scored detected_recovered only because the
# job finished as the clean run did (final_matches_clean, one clean run per campaign in DIR/clean
# reused by every fault).
# Usage: campaign_restarts_check.sh NANCHAOS_BINARY SOURCE_DIR OUT_DIR
set -uo pipefail
bin=$1 src=$2 out=$3
rm -rf "$out" && mkdir -p "$out"
for side in a b; do
  "$bin" campaign "$src/scenarios/restart-crash-resume-from-checkpoint.toml" --faults 4 --seed 3 \
    --kinds crash,checkpoint --quiet --out "$out/$side"
  rc=$?
  [ "$rc" -eq 0 ] || { echo "FAIL: campaign $side exited $rc, want 0"; exit 1; }
done
python3 - "$out" <<'PY'
import json, os, sys
out = sys.argv[1]
def rows(side):
    c = json.load(open(f"{out}/{side}/campaign.json"))
    keep = ("fault", "truth", "outcome", "named", "named_by")
    return [{k: f.get(k) for k in keep} for f in c["faults"]]
a, b = rows("a"), rows("b")
assert a == b, f"same seed, other rows:\n{a}\n{b}"
kinds = [r["fault"]["kind"] for r in a]
assert "crash" in kinds and "checkpoint" in kinds, kinds
for i, r in enumerate(a):
    assert r["outcome"] == "detected_recovered", (i, r)
    scen = open(f"{out}/a/faults/{i:03}/scenario.toml").read()
    assert "final_matches_clean = true" in scen, scen
    report = json.load(open(f"{out}/a/faults/{i:03}/clean/clean.json"))
    assert report["key"] == json.load(open(f"{out}/a/clean/clean.json"))["key"], i
    if r["fault"]["kind"] == "checkpoint":
        assert r["truth"]["cause"] == "checkpoint_corruption", r
        assert r["named"] and r["named"]["detector"] == "checkpoint", r
# One clean run for the campaign: only DIR/clean has its events; the faults copied its digests.
assert os.path.exists(f"{out}/a/clean/events/rank-0.jsonl")
assert not os.path.exists(f"{out}/a/faults/000/clean/events"), "a fault ran its own clean run"
print(f"{len(a)} faults, same rows twice: {[(r['fault']['kind'], r['outcome']) for r in a]}")
PY
