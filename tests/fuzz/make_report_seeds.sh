#!/bin/sh
# Seeds of nanchaos_fuzz_report (tests/fuzz/fuzz_report.cpp): OUT_DIR then input files.
# A *.json file becomes a report seed ('R' + the file); a *.events file (rank logs separated by
# form feeds) becomes an event-log seed ('E', scenario 0, clean exit, + the file).
set -eu
out=$1
shift
for f in "$@"; do
  name=$(basename "$f")
  case "$f" in
    *.json) { printf 'R'; cat "$f"; } > "$out/$name" ;;
    *.events) { printf 'E\000\000'; cat "$f"; } > "$out/$name" ;;
  esac
done
