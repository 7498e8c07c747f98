#!/usr/bin/env bash
# The shipped campaign in CI (issue 16): campaigns/mlp-default.toml, 12 faults of seed 1, two
# launches at a time, compared with the committed baseline results/baselines/campaign-mlp-default.json
# (same seed, so the same draws: compare goes fault by fault). Then the same campaign against a
# weakened stack (tests/weakened/campaign-mlp-default-weak.toml: the loss, grad and replica
# detectors left out) must make compare exit 1, and compare of a campaign with itself must exit 0.
# Usage: campaign_check.sh NANCHAOS_BINARY SOURCE_DIR OUT_DIR
set -uo pipefail
bin=$1 src=$2 out=$3
rm -rf "$out"
mkdir -p "$out"
fail=0
start=$(date +%s)
"$bin" campaign "$src/campaigns/mlp-default.toml" --faults 12 --seed 1 --jobs 2 --quiet \
  --out "$out/base"
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

"$bin" campaign "$src/tests/weakened/campaign-mlp-default-weak.toml" --faults 12 --seed 1 \
  --jobs 2 --quiet --out "$out/weak"
rc=$?
# Its [campaign] min_coverage (kept from the shipped scenario) is missed: exit 1.
[ "$rc" -eq 1 ] || { echo "FAIL: the weakened campaign exited $rc, want 1 (threshold missed)"; fail=1; }
"$bin" compare "$src/results/baselines/campaign-mlp-default.json" "$out/weak/campaign.json" \
  --format md > "$out/vs-weak.md"
rc=$?
cat "$out/vs-weak.md"
[ "$rc" -eq 1 ] || { echo "FAIL: compare against the weakened stack exited $rc, want 1"; fail=1; }
grep -q -- '- \*\*outcome\*\*: f0' "$out/vs-weak.md" ||
  { echo "FAIL: no fault named with a worse outcome"; fail=1; }
echo "total: $(( $(date +%s) - start )) s"
exit $fail
