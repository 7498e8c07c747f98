#!/usr/bin/env bash
# `nanchaos run --shard I/N` and `nanchaos merge` (harness/controller/shard.h, merge.h):
#   1. merging the shipped suite's run alone gives back its report.json field for field (only
#      run_dir moves into the merged folder) and a report.html with as many charts;
#   2. seven fast shipped scenarios in 3 shards, balanced by the shipped run's wall times: the
#      shards are disjoint and cover the seven, and the merged report has the suite's order and
#      the same behaviour (tests/report_behaviour.py) as the shipped run of the same scenarios;
#   3. a missing shard: the merged report lists its scenarios as not run, exit 3 naming it;
#      the same shard twice, an existing report in --out and a bad --shard exit 2.
# Usage: merge_check.sh NANCHAOS_BINARY SOURCE_DIR SHIPPED_RUN OUT_DIR
set -uo pipefail
bin=$1 src=$2 shipped=$3 out=$4
rm -rf "$out"
mkdir -p "$out"
fail=0
say_fail() { echo "FAIL: $*"; fail=1; }

"$bin" merge "$shipped" --out "$out/whole" --quiet
rc=$?
[ $rc -le 1 ] || say_fail "merge of the shipped run exited $rc"
python3 - "$shipped" "$out/whole" <<'PY' || fail=1
import json, sys
a = json.load(open(sys.argv[1] + "/report.json"))
b = json.load(open(sys.argv[2] + "/report.json"))
def strip(s):
    s = {k: v for k, v in s.items() if k != "run_dir"}
    if "trials" in s:
        s["trials"] = [{k: v for k, v in t.items() if k != "run_dir"} for t in s["trials"]]
    return s
bad = [x["name"] for x, y in zip(a["scenarios"], b["scenarios"]) if strip(x) != strip(y)]
top = [k for k in a if k != "scenarios" and a[k] != b.get(k)]
if len(a["scenarios"]) != len(b["scenarios"]) or bad or top:
    print("FAIL: merged report differs from the run's:", bad[:5], top)
    sys.exit(1)
moved = [s for s in b["scenarios"] if s["run_dir"] and not s["run_dir"].startswith(sys.argv[2])]
if moved:
    print("FAIL: run_dir not in the merged folder:", moved[0]["run_dir"])
    sys.exit(1)
print(f"merge of one run: {len(b['scenarios'])} scenarios equal field for field")
PY
na=$(grep -o '<svg' "$shipped/report.html" | wc -l)
nb=$(grep -o '<svg' "$out/whole/report.html" | wc -l)
[ "$na" -eq "$nb" ] || say_fail "report.html charts: $na in the run, $nb merged"

names="state-loss-scale-drift-fp16 transformer-transient-fp16-overflow-default nan-activation-rank1
  transformer-empty-mask activation-transient-full transformer-inf-loss bitflip-gradient-clipped"
mkdir -p "$out/suite"
for n in $names; do cp "$src/scenarios/$n.toml" "$out/suite/"; done
for i in 1 2 3; do
  "$bin" run "$out/suite" --shard "$i/3" --shard-balance "$shipped/report.json" --quiet \
    --out "$out/shard-$i"
  rc=$?
  [ $rc -eq 0 ] || say_fail "shard $i/3 exited $rc"
done
"$bin" merge "$out/shard-1" "$out/shard-3" "$out/shard-2" --out "$out/merged" --quiet
rc=$?
[ $rc -eq 0 ] || say_fail "merge of the three shards exited $rc"
python3 - "$out" "$shipped" "$src/tests/report_behaviour.py" $names <<'PY' || fail=1
import json, subprocess, sys
out, shipped, behaviour, names = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
parts = [[s["name"] for s in json.load(open(f"{out}/shard-{i}/report.json"))["scenarios"]]
         for i in (1, 2, 3)]
flat = [n for p in parts for n in p]
if sorted(flat) != sorted(names) or any(not p for p in parts):
    print("FAIL: shards", parts, "do not split the 7 scenarios into 3 non-empty parts")
    sys.exit(1)
merged = json.load(open(f"{out}/merged/report.json"))
order = [s["name"] for s in merged["scenarios"]]
if order != sorted(names) or "shard" in merged or merged["interrupted"]:
    print("FAIL: merged order", order, "want", sorted(names))
    sys.exit(1)
def behaviour_of(report):
    text = subprocess.run([sys.executable, behaviour, report], check=True,
                          capture_output=True, text=True).stdout
    return {s["name"]: s for s in json.loads(text)["scenarios"]}
a, b = behaviour_of(f"{shipped}/report.json"), behaviour_of(f"{out}/merged/report.json")
for n in names:
    x = {k: v for k, v in a[n].items() if k != "file"}
    y = {k: v for k, v in b[n].items() if k != "file"}
    if x != y:
        print("FAIL: behaviour of", n, "differs between the shipped run and the merged shards:",
              [k for k in x if x[k] != y.get(k)])
        sys.exit(1)
print("3 shards:", [len(p) for p in parts], "merged with the shipped run's behaviour")
PY

"$bin" merge "$out/shard-1" "$out/shard-2" --out "$out/partial" --quiet 2> "$out/partial.err"
rc=$?
[ $rc -eq 3 ] || say_fail "merge with shard 3 missing exited $rc, want 3"
grep -q "shard(s) 3 of 3 missing" "$out/partial.err" || say_fail "missing shard not named: $(cat "$out/partial.err")"
python3 - "$out" <<'PY' || fail=1
import json, sys
out = sys.argv[1]
third = [s["name"] for s in json.load(open(f"{out}/shard-3/report.json"))["scenarios"]]
p = json.load(open(f"{out}/partial/report.json"))
if not p["interrupted"] or sorted(p["not_run"]) != sorted(third):
    print("FAIL: partial merge not_run", p.get("not_run"), "want", third)
    sys.exit(1)
PY
"$bin" merge "$out/shard-1" "$out/shard-1" --out "$out/twice" --quiet 2>/dev/null
[ $? -eq 2 ] || say_fail "merge of one shard twice did not exit 2"
"$bin" merge "$out/shard-2" --out "$out/merged" --quiet 2>/dev/null
[ $? -eq 2 ] || say_fail "merge into a folder with a report did not exit 2"
"$bin" run "$out/suite" --shard 4/3 --quiet --out "$out/bad" 2>/dev/null
[ $? -eq 2 ] || say_fail "--shard 4/3 did not exit 2"
[ $fail -eq 0 ] && echo "merge_check: all passed"
exit $fail
