#!/usr/bin/env bash
# report.html in a real browser: loads the shipped suite's report.html (written by CTest's
# shipped_suite_passes; nothing runs here) in headless Chromium, checks the DOM names every
# scenario of its report.json and carries the inline SVG charts (a timeline per scenario that ran
# a job, a latency chart per detector, the step-time charts of each job that logged phase times),
# and that a screenshot is not blank.
# Usage: html_report_check.sh SOURCE_DIR SHIPPED_RUN_DIR OUT_DIR
set -euo pipefail
src=$1 run=$2 out=$3
page="$run/report.html"
test -s "$run/report.json" ||
  { echo "FAIL: $run/report.json missing: shipped_suite_passes (fixture shipped_report) must run first"; exit 1; }
test -s "$page" || { echo "FAIL: $page missing or empty (shipped_suite_passes writes it)"; exit 1; }
rm -rf "$out"
mkdir -p "$out"

browser=$(command -v chromium || command -v chromium-browser || true)
test -n "$browser" || { echo "FAIL: chromium not installed (.ci/install-deps installs it)"; exit 1; }
# Root in a container: no sandbox; no GPU; /dev/shm may be tiny.
flags=(--headless --no-sandbox --disable-gpu --disable-dev-shm-usage --hide-scrollbars
       --user-data-dir="$out/profile")
timeout 120 "$browser" "${flags[@]}" --dump-dom "file://$page" > "$out/dom.html" 2> "$out/chromium-dom.log"
timeout 120 "$browser" "${flags[@]}" --window-size=1280,2600 --screenshot="$out/report.png" \
  "file://$page" > /dev/null 2> "$out/chromium-shot.log"

# The scenarios of the report, and how many of them ran a job (those get a timeline).
mapfile -t scenarios < <(python3 -c 'import json, sys
for s in json.load(open(sys.argv[1]))["scenarios"]: print(s["name"])' "$run/report.json")
ran=$(python3 -c 'import json, sys
print(sum(1 for s in json.load(open(sys.argv[1]))["scenarios"] if s.get("run_dir") and s.get("outcome")))' \
  "$run/report.json")
[ "${#scenarios[@]}" -gt 0 ] || { echo "FAIL: $run/report.json lists no scenario"; exit 1; }

fail=0
grep -q '<table id="summary">' "$out/dom.html" || { echo "FAIL: no summary table in the DOM"; fail=1; }
for s in "${scenarios[@]}"; do
  grep -q "<section class=\"scenario\" id=\"s-$s\">" "$out/dom.html" ||
    { echo "FAIL: scenario $s has no section in the DOM"; fail=1; }
done
# One timeline per scenario that ran plus at least one latency chart.
svgs=$(grep -o '<svg' "$out/dom.html" | wc -l)
want=$((ran + 1))
if [ "$svgs" -lt "$want" ]; then echo "FAIL: $svgs inline SVGs in the DOM, want >= $want"; fail=1; fi
# The step-time charts: one pair per scenario whose job logged phase times (step_times).
timed=$(python3 -c 'import json, sys
print(sum(1 for s in json.load(open(sys.argv[1]))["scenarios"] if s.get("step_times")))' \
  "$run/report.json")
charts=$(grep -o '<div class="charts step-charts">' "$out/dom.html" | wc -l)
[ "$charts" -eq "$timed" ] ||
  { echo "FAIL: $charts step-time chart blocks in the DOM, want $timed (scenarios with step_times)"; fail=1; }
grep -q 'class="note"' "$out/dom.html" && { echo "FAIL: the page carries a note (charts missing?)"; fail=1; }
test -s "$out/report.png" || { echo "FAIL: no screenshot"; exit 1; }
python3 "$src/tests/png_check.py" "$out/report.png" 20000 8 || fail=1
echo "DOM: ${#scenarios[@]} scenarios ($ran ran a job, $timed with step times), $svgs inline SVGs;" \
  "screenshot: $out/report.png"
exit $fail
