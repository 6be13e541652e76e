#!/usr/bin/env python3
"""Turns //kernels/cpu:kernels_benchmark JSON into a Markdown table of each
product kernel's weight-read rate and FLOP/s as fractions of the ceilings
measured in the same run: each case's own read bandwidth, measured just
before and after it (the memory speed of a shared machine drifts within a
run), and BM_PeakFlops. Medians are used when the run has repetitions.

  kernels_benchmark --benchmark_format=json --benchmark_repetitions=3 \\
      --benchmark_report_aggregates_only=true > k.json
  tools/kernel_ratios.py k.json
"""
import json
import sys

TYPES = ["f32", "bf16", "f16", "int8", "int4"]


def main():
    runs = json.load(open(sys.argv[1]))["benchmarks"]
    # Prefer medians; fall back to single runs.
    rows = [r for r in runs if r.get("aggregate_name", "median") == "median"]
    by_name = {r["run_name"]: r for r in rows}
    # A filtered run may leave out one probe (NaN ratios for it).
    bandwidth = next((r["bytes_per_second"] for n, r in by_name.items()
                      if n.startswith("BM_ReadBandwidth")), float("nan"))
    peak = next((r["flops_per_second"] for n, r in by_name.items()
                 if n.startswith("BM_PeakFlops")), float("nan"))
    print(f"read bandwidth {bandwidth / 1e9:.1f} GB/s, peak {peak / 1e9:.0f} GFLOP/s\n")
    print("| weights | out×in | rows n | GB/s of weights | read GB/s beside it "
          "| of bandwidth | GFLOP/s | of peak |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for name, r in by_name.items():
        if not name.startswith("BM_MatMul/"):
            continue
        _, t, out, inp, n = name.split("/")[:5]
        gbs = r["weight_bytes_per_second"]
        fl = r["flops_per_second"]
        beside = r.get("read_bytes_per_second", bandwidth)
        print(f"| {TYPES[int(t)]} | {out}×{inp} | {n} | {gbs / 1e9:.1f} | "
              f"{beside / 1e9:.1f} | {gbs / beside:.0%} | {fl / 1e9:.1f} | "
              f"{fl / peak:.0%} |")


if __name__ == "__main__":
    main()
