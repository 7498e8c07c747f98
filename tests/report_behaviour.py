#!/usr/bin/env python3
"""Print what a report.json says about behaviour, with timings, memory and host facts removed.

Usage: report_behaviour.py REPORT.json > behaviour.json

Two runs of the same scenarios with the same seeds must print the same text whenever the code's
behaviour did not change (a refactor): verdicts, checks, detections (detector, rank, step, layer,
cause, transient, action), injections (kind, rank, step, target), steps completed, final loss and
digests, outcomes. Dropped: every field measured in ms or us, step_times, step_scores,
wall/clock/memory/host/pid facts, paths of the run folder, the suite's start time, and the
measured value of a check on a time bound (its pass/fail stays). Injections and detections are
sorted: between ranks their order is the order in which events arrived. `diff` of two outputs is
then empty for an unchanged behaviour (the redesign issue's acceptance).
"""
import json
import re
import sys

# Keys whose values are measurements of time or of the host, not behaviour.
DROP = re.compile(
    r"(_ms|_us|_mib|_kib)$|^(t_ms|wall_ms|started|host|hosts|run_dir|clock_offsets|controller|"
    r"memory|job_start_us|pid|pids|fds|nanchaos_version|longest_collective_wait_ms|step_times|"
    r"step_scores)$")
# Sub-objects that only summarise measured times (stats of ms/us over trials).
DROP_STATS = {"latency_ms", "decision_us", "wall_ms", "abort_latency_ms"}


# Lists of per-rank facts whose order is the order the ranks' events arrived in (wall-clock
# order between processes): compared as sets, sorted.
UNORDERED = {"injections", "detections"}


def clean(obj, key=""):
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            if DROP.search(k) or k in DROP_STATS:
                continue
            out[k] = clean(v, k)
        # A check of a time bound (max_latency_ms ...): its measured value is a time.
        if DROP.search(str(obj.get("key", ""))) and "actual" in out:
            del out["actual"]
        return out
    if isinstance(obj, list):
        items = [clean(v) for v in obj]
        if key in UNORDERED:
            items.sort(key=lambda v: json.dumps(v, sort_keys=True))
        return items
    return obj


def main():
    with open(sys.argv[1]) as f:
        report = json.load(f)
    json.dump(clean(report), sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
