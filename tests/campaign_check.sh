#!/usr/bin/env bash
# The shipped campaign in CI (issues 16, 27): campaigns/mlp-default.toml, 50 faults of the
# held-out seed 2 (the attribution rules were tuned on seed 1), two launches at a time, compared
# with the committed baseline results/baselines/campaign-mlp-default.json, a real run of the same
# campaign (same seed, so the same draws: compare goes fault by fault, and the baseline against
# this run is two runs of the same stack: the paired test's false alarms). Then:
#   - a weakened stack (tests/weakened/campaign-mlp-default-weak.toml: loss, grad and replica left
#     out) misses its [campaign] thresholds (exit 1) and compare flags it (exit 1, outcomes);
#   - one detector removed (tests/weakened/campaign-mlp-default-no-loss.toml: `loss`) keeps
#     coverage and every outcome; compare must flag its attribution by the paired test alone;
#   - compare of a campaign with itself exits 0.
# Usage: campaign_check.sh NANCHAOS_BINARY SOURCE_DIR OUT_DIR
set -uo pipefail
bin=$1 src=$2 out=$3
rm -rf "$out"
mkdir -p "$out"
fail=0
start=$(date +%s)
faults=50 seed=2
campaign() {  # campaign SCENARIO OUT: runs it, prints its exit status
  "$bin" campaign "$1" --faults "$faults" --seed "$seed" --jobs 2 --quiet --out "$2"
}
campaign "$src/campaigns/mlp-default.toml" "$out/base"
rc=$?
echo "campaign: exit $rc after $(( $(date +%s) - start )) s"
[ "$rc" -eq 0 ] || { echo "FAIL: the shipped campaign exited $rc, want 0"; fail=1; }
for f in campaign.json campaign.md campaign.xml campaign.html; do
  test -s "$out/base/$f" || { echo "FAIL: $out/base/$f missing"; fail=1; }
done
"$bin" compare "$src/results/baselines/campaign-mlp-default.json" "$out/base/campaign.json" \
  --format md > "$out/vs-baseline.md"
rc=$?
cat "$out/vs-baseline.md"
[ "$rc" -eq 0 ] || { echo "FAIL: compare against the baseline exited $rc, want 0"; fail=1; }
"$bin" compare "$out/base/campaign.json" "$out/base/campaign.json" > /dev/null
rc=$?
[ "$rc" -eq 0 ] || { echo "FAIL: compare of a campaign with itself exited $rc"; fail=1; }

campaign "$src/tests/weakened/campaign-mlp-default-weak.toml" "$out/weak"
rc=$?
# Its [campaign] thresholds (kept from the shipped scenario) are missed: exit 1.
[ "$rc" -eq 1 ] || { echo "FAIL: the weakened campaign exited $rc, want 1 (threshold missed)"; fail=1; }
"$bin" compare "$src/results/baselines/campaign-mlp-default.json" "$out/weak/campaign.json" \
  --format md > "$out/vs-weak.md"
rc=$?
cat "$out/vs-weak.md"
[ "$rc" -eq 1 ] || { echo "FAIL: compare against the weakened stack exited $rc, want 1"; fail=1; }
grep -q -- '- \*\*outcome\*\*: f0' "$out/vs-weak.md" ||
  { echo "FAIL: no fault named with a worse outcome"; fail=1; }

campaign "$src/tests/weakened/campaign-mlp-default-no-loss.toml" "$out/no-loss" > /dev/null
"$bin" compare "$src/results/baselines/campaign-mlp-default.json" "$out/no-loss/campaign.json" \
  --format md > "$out/vs-no-loss.md"
rc=$?
cat "$out/vs-no-loss.md"
[ "$rc" -eq 1 ] || { echo "FAIL: compare against one detector removed exited $rc, want 1"; fail=1; }
grep -q -- '- \*\*attribution.cause\*\*: .*McNemar' "$out/vs-no-loss.md" ||
  { echo "FAIL: the paired test did not flag the cause attribution"; fail=1; }
if grep -q -- '- \*\*outcome\*\*' "$out/vs-no-loss.md"; then
  echo "FAIL: an outcome regression with the loss detector removed (the test would not show the"
  echo "      paired test's power)"
  fail=1
fi
# The same campaign in two shards (campaign --shard I/2) merged: the rows equal the one run's,
# fault for fault (times and re-run paths aside), and the thresholds are checked again.
for i in 1 2; do
  "$bin" campaign "$src/campaigns/mlp-default.toml" --faults "$faults" --seed "$seed" --jobs 1 \
    --quiet --shard "$i/2" --out "$out/shard-$i"
  rc=$?
  [ "$rc" -le 1 ] || { echo "FAIL: campaign shard $i/2 exited $rc"; fail=1; }
done
"$bin" merge "$out/shard-1" "$out/shard-2" --out "$out/merged" --quiet
rc=$?
[ "$rc" -eq 0 ] || { echo "FAIL: merge of the campaign shards exited $rc, want 0"; fail=1; }
python3 - "$out/base/campaign.json" "$out/merged/campaign.json" "$out/shard-1/campaign.json" <<'PY' || fail=1
import json, sys
base, merged, one = (json.load(open(p)) for p in sys.argv[1:4])
def row(f):
    f = {k: v for k, v in f.items() if k not in ("wall_ms", "latency_ms", "rerun")}
    if f.get("harness_named"):
        f["harness_named"] = {k: v for k, v in f["harness_named"].items() if k != "latency_ms"}
    return f
if [f["index"] for f in one["faults"]] != list(range(0, len(base["faults"]), 2)):
    print("FAIL: shard 1/2 measured", [f["index"] for f in one["faults"]])
    sys.exit(1)
diff = [a["index"] for a, b in zip(base["faults"], merged["faults"]) if row(a) != row(b)]
if len(base["faults"]) != len(merged["faults"]) or diff:
    print("FAIL: merged campaign rows differ from the one run's at faults", diff[:10])
    sys.exit(1)
for k in ("coverage", "attribution", "outcomes", "false_positives", "errors"):
    if base["summary"][k] != merged["summary"][k]:
        print("FAIL: merged summary", k, merged["summary"][k], "!=", base["summary"][k])
        sys.exit(1)
if base["thresholds"] != merged["thresholds"] or "shard" in merged:
    print("FAIL: merged thresholds", merged["thresholds"], "!=", base["thresholds"])
    sys.exit(1)
print(f"campaign in 2 shards merged: {len(merged['faults'])} rows equal the one run's")
PY
echo "total: $(( $(date +%s) - start )) s"
exit $fail
