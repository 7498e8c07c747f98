#!/usr/bin/env bash
# `nanchaos compare` catches a weakened stack: the shipped suite's report (CTest's
# shipped_suite_passes; its nan-activation-rank1 is the base) against a run of a copy of that
# scenario with its catching detector (loss) disabled (tests/weakened/). Only the weakened copy
# runs here. compare --common (the suite's other scenarios are not in the weakened run) must exit
# 1 and name the scenario and the regression kinds; the shipped report against itself must exit 0.
# Usage: weakened_stack_check.sh NANCHAOS_BINARY SOURCE_DIR SHIPPED_RUN_DIR OUT_DIR
set -uo pipefail
bin=$1 src=$2 run=$3 out=$4
base="$run/report.json"
test -s "$base" ||
  { echo "FAIL: $base missing: shipped_suite_passes (fixture shipped_report) must run first"; exit 1; }
verdict=$(python3 -c 'import json, sys
print(next((s["verdict"] for s in json.load(open(sys.argv[1]))["scenarios"]
            if s["name"] == "nan-activation-rank1"), "absent"))' "$base") ||
  { echo "FAIL: cannot read $base"; exit 1; }
[ "$verdict" = pass ] ||
  { echo "FAIL: the shipped nan-activation-rank1 in $base is $verdict, want pass"; exit 1; }
rm -rf "$out"
mkdir -p "$out"
"$bin" run "$src/tests/weakened/nan-activation-rank1-no-loss.toml" --quiet --out "$out/weak"
rc=$?
[ "$rc" -eq 1 ] || { echo "FAIL: the weakened run exited $rc, want 1 (a failed check)"; exit 1; }

fail=0
"$bin" compare "$base" "$base" > "$out/same.txt"
rc=$?
[ "$rc" -eq 0 ] || { echo "FAIL: compare of a report with itself exited $rc"; cat "$out/same.txt"; fail=1; }

"$bin" compare "$base" "$out/weak/report.json" --common --format md > "$out/compare.md"
rc=$?
cat "$out/compare.md"
[ "$rc" -eq 1 ] || { echo "FAIL: compare exited $rc, want 1"; fail=1; }
grep -q -- '- `nan-activation-rank1`: \*\*verdict\*\*: pass → fail' "$out/compare.md" ||
  { echo "FAIL: no verdict regression named for nan-activation-rank1"; fail=1; }
grep -q -- '- `nan-activation-rank1`: \*\*attribution\*\*' "$out/compare.md" ||
  { echo "FAIL: no attribution regression named for nan-activation-rank1"; fail=1; }

"$bin" compare "$base" "$out/weak/report.json" --common --format json > "$out/compare.json"
rc=$?
[ "$rc" -eq 1 ] || { echo "FAIL: compare --format json exited $rc, want 1"; fail=1; }
grep -q '"regressed": true' "$out/compare.json" || { echo "FAIL: json says not regressed"; fail=1; }
exit $fail
