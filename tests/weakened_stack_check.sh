#!/usr/bin/env bash
# `nanchaos compare` catches a weakened stack: the shipped nan-activation-rank1 scenario against a
# copy of it with its catching detector (loss) disabled (tests/weakened/). compare must exit 1 and
# name the scenario and the regression kinds; the base against itself must exit 0.
# Usage: weakened_stack_check.sh NANCHAOS_BINARY SOURCE_DIR OUT_DIR
set -uo pipefail
bin=$1 src=$2 out=$3
rm -rf "$out"
mkdir -p "$out"
# A copy: other tests look for leftover ranks by the shipped file's path (see html_report_check.sh).
cp "$src/scenarios/nan-activation-rank1.toml" "$out/"
"$bin" run "$out/nan-activation-rank1.toml" --quiet --out "$out/base" ||
  { echo "FAIL: the shipped scenario did not pass"; exit 1; }
"$bin" run "$src/tests/weakened/nan-activation-rank1-no-loss.toml" --quiet --out "$out/weak"
rc=$?
[ "$rc" -eq 1 ] || { echo "FAIL: the weakened run exited $rc, want 1 (a failed check)"; exit 1; }

fail=0
"$bin" compare "$out/base/report.json" "$out/base/report.json" > "$out/same.txt"
rc=$?
[ "$rc" -eq 0 ] || { echo "FAIL: compare of a report with itself exited $rc"; cat "$out/same.txt"; fail=1; }

"$bin" compare "$out/base/report.json" "$out/weak/report.json" --format md > "$out/compare.md"
rc=$?
cat "$out/compare.md"
[ "$rc" -eq 1 ] || { echo "FAIL: compare exited $rc, want 1"; fail=1; }
grep -q -- '- `nan-activation-rank1`: \*\*verdict\*\*: pass → fail' "$out/compare.md" ||
  { echo "FAIL: no verdict regression named for nan-activation-rank1"; fail=1; }
grep -q -- '- `nan-activation-rank1`: \*\*attribution\*\*' "$out/compare.md" ||
  { echo "FAIL: no attribution regression named for nan-activation-rank1"; fail=1; }

"$bin" compare "$out/base/report.json" "$out/weak/report.json" --format json > "$out/compare.json"
rc=$?
[ "$rc" -eq 1 ] || { echo "FAIL: compare --format json exited $rc, want 1"; fail=1; }
grep -q '"regressed": true' "$out/compare.json" || { echo "FAIL: json says not regressed"; fail=1; }
exit $fail
