#!/usr/bin/env bash
# report.html in a real browser: runs a small shipped suite (a detection, a hang that aborts, a
# crash) with --trials 2, loads the page in headless Chromium, checks the DOM names every
# scenario and carries the inline SVG charts, and that a screenshot is not blank.
# Usage: html_report_check.sh NANCHAOS_BINARY SOURCE_DIR OUT_DIR
set -euo pipefail
bin=$1 src=$2 out=$3
rm -rf "$out"
mkdir -p "$out"
scenarios=(nan-activation-rank1 hang-forever-rank2 crash-rank1)
# Copies: other tests (tests/harness/controller_test.cpp) look for leftover ranks by the shipped
# file's path, and CTest may run them at the same time as this one.
mkdir -p "$out/scenarios"
files=()
for s in "${scenarios[@]}"; do
  cp "$src/scenarios/$s.toml" "$out/scenarios/"
  files+=("$out/scenarios/$s.toml")
done
"$bin" run "${files[@]}" --trials 2 --quiet --out "$out/run"
page="$out/run/report.html"
test -s "$page" || { echo "FAIL: $page missing or empty"; exit 1; }

browser=$(command -v chromium || command -v chromium-browser || true)
test -n "$browser" || { echo "FAIL: chromium not installed (.ci/install-deps installs it)"; exit 1; }
# Root in a container: no sandbox; no GPU; /dev/shm may be tiny.
flags=(--headless --no-sandbox --disable-gpu --disable-dev-shm-usage --hide-scrollbars
       --user-data-dir="$out/profile")
timeout 120 "$browser" "${flags[@]}" --dump-dom "file://$page" > "$out/dom.html" 2> "$out/chromium-dom.log"
timeout 120 "$browser" "${flags[@]}" --window-size=1280,2600 --screenshot="$out/report.png" \
  "file://$page" > /dev/null 2> "$out/chromium-shot.log"

fail=0
grep -q '<table id="summary">' "$out/dom.html" || { echo "FAIL: no summary table in the DOM"; fail=1; }
for s in "${scenarios[@]}"; do
  grep -q "<section class=\"scenario\" id=\"s-$s\">" "$out/dom.html" ||
    { echo "FAIL: scenario $s has no section in the DOM"; fail=1; }
done
# One timeline per scenario plus a latency chart per detector that caught something first.
svgs=$(grep -o '<svg' "$out/dom.html" | wc -l)
if [ "$svgs" -lt 5 ]; then echo "FAIL: $svgs inline SVGs in the DOM, want >= 5"; fail=1; fi
grep -q 'class="note"' "$out/dom.html" && { echo "FAIL: the page carries a note (charts missing?)"; fail=1; }
test -s "$out/report.png" || { echo "FAIL: no screenshot"; exit 1; }
python3 "$src/tests/png_check.py" "$out/report.png" 20000 8 || fail=1
echo "DOM: $svgs inline SVGs; screenshot: $out/report.png"
exit $fail
