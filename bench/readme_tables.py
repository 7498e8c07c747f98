#!/usr/bin/env python3
"""Prints the figure tables of bench/README.md from one bench/run.py result file.

  bench/readme_tables.py bench/results/2026-12-03-cpu.json

Every cell is `median (min-max)` over the file's repetitions, as `bench/run.py summarize --json`
computes it (runs with rc 0 only); nothing else is read. Sections: STEP, CONSENSUS, SCAN,
CAMPAIGN, AGENT (a section whose program the file lacks is skipped). Bandwidths are printed in
GiB/s (2^30 bytes per second), shares of a step in percent.
"""
import json
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main(path: str) -> None:
    out = subprocess.run([sys.executable, str(HERE / "run.py"), "summarize", path, "--json"],
                         capture_output=True, text=True, check=True).stdout
    S = {(r["program"], r["row"], r["counter"]): r for r in json.loads(out)}
    programs = {p for p, _, _ in S}

    def c(p, row, k, f="{:.3f}", scale=1.0):
        r = S.get((p, row, k))
        if not r:
            return "-"
        m = lambda x: f.format(x * scale)  # noqa: E731
        return f"{m(r['median'])} ({m(r['min'])}-{m(r['max'])})"

    if "step" in programs:
        print("STEP\n")
        print("| Ranks | Stack | Step mean (ms) | `ratio_vs_none` | `ratio_p50_vs_none` | "
              "`ratio_cpu_vs_none` | localization, % of step | replica check, % of step |")
        print("|--:|---|--:|--:|--:|--:|--:|--:|")
        for rk in (1, 4):
            for st in ("none", "default", "full", "anomaly", "replica", "sdc"):
                row = f"BM_StepOverhead/ranks:{rk}/stack:{st}/iterations:1/manual_time"
                loc = c("step", row, "localize_share_of_step", "{:.2f}", 100) if st != "none" else "-"
                rep = (c("step", row, "replica_share_of_step", "{:.2f}", 100)
                       if st in ("default", "replica") else "-")
                print(f"| {rk} | `{st}` | {c('step', row, 'step_ms', '{:.0f}')} | "
                      f"{c('step', row, 'ratio_vs_none')} | {c('step', row, 'ratio_p50_vs_none')} | "
                      f"{c('step', row, 'ratio_cpu_vs_none')} | {loc} | {rep} |")
        sdc_rows = [(rk, f"BM_StepOverhead/ranks:{rk}/stack:sdc/iterations:1/manual_time")
                    for rk in (1, 4)]
        if any(("step", row, "sdc_share_of_step") in S for _, row in sdc_rows):
            print("\nSTEP SDC\n")
            print("| Ranks | recompute (ms) | recompute, % of a step | at `sdc_every = 100`, % of a step |")
            print("|--:|--:|--:|--:|")
            for rk, row in sdc_rows:
                print(f"| {rk} | {c('step', row, 'sdc_recompute_ms', '{:.0f}')} | "
                      f"{c('step', row, 'sdc_share_of_step', '{:.1f}', 100)} | "
                      f"{c('step', row, 'sdc_every100_overhead', '{:.2f}', 100)} |")
    if "consensus" in programs:
        print("\nCONSENSUS\n")
        print("| Ranks | bare p50 (us) | consensus p50 (us) | `ratio_vs_bare` | "
              "`ratio_mean_vs_bare` | `payload_bytes` |")
        print("|--:|--:|--:|--:|--:|--:|")
        for n in (2, 4, 8, 16, 32, 64):
            row = f"BM_ConsensusRound/ranks:{n}/iterations:1/manual_time"
            if ("consensus", row, "ratio_vs_bare") not in S:
                continue
            print(f"| {n} | {c('consensus', row, 'bare_p50_us', '{:.1f}')} | "
                  f"{c('consensus', row, 'consensus_p50_us', '{:.1f}')} | "
                  f"{c('consensus', row, 'ratio_vs_bare')} | {c('consensus', row, 'ratio_mean_vs_bare')} | "
                  f"{S[('consensus', row, 'payload_bytes')]['median']:.0f} |")
    if "scan" in programs:
        print("\nSCAN\n")
        print("| Benchmark | GiB/s of gradient bytes | Same-run ratio |")
        print("|---|--:|--:|")
        for b, k in (("BM_ReadBandwidth", None), ("BM_FusedGradScan", "ratio_vs_read"),
                     ("BM_PostReduceScaleScan", "ratio_vs_read"), ("BM_PackCopy", None),
                     ("BM_PackAndScan", "ratio_vs_copy"), ("BM_PerTensorIsfiniteItem", None)):
            ratio = f"`{k}` {c('scan', b, k)}" if k else ""
            print(f"| `{b}` | {c('scan', b, 'bytes_per_second', '{:.1f}', 2.0**-30)} | {ratio} |")
    if "campaign" in programs:
        row = "BM_CampaignFaultsPerMinute/iterations:1/real_time"
        print("\nCAMPAIGN\n")
        print("| Mode | Faults per minute |\n|---|--:|")
        print(f"| `--one-launch-per-fault` | {c('campaign', row, 'faults_per_min_one_launch', '{:.1f}')} |")
        print(f"| in-launch (one launch) | {c('campaign', row, 'faults_per_min_in_launch', '{:.0f}')} |")
        print(f"| `ratio_vs_one_launch` | **{c('campaign', row, 'ratio_vs_one_launch', '{:.1f}')}** |")
        print(f"| `rows_equal` (1: the same rows both ways) | {c('campaign', row, 'rows_equal', '{:.0f}')} |")
    if "agent" in programs:
        print("\nAGENT\n")
        print("| Counter | Median (min-max) |\n|---|--:|")
        for k in ("detached_ms_p50", "attached_ms_p50", "ratio_vs_detached", "ratio_mean_vs_detached",
                  "ratio_cpu_vs_detached", "ratio_per_round_median"):
            print(f"| `{k}` | {c('agent', 'agent', k, '{:.1f}' if k.endswith('p50') else '{:.3f}')} |")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
