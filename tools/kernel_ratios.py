#!/usr/bin/env python3
"""Turns //kernels/cpu:kernels_benchmark JSON into a Markdown table of each
product kernel's weight-read rate and FLOP/s as fractions of the ceilings
measured in the same run: each case's own read bandwidth, measured just
before and after it (the memory speed of a shared machine drifts within a
run), and BM_PeakFlops. With repetitions, each figure is the median over
them and each ratio the median of the repetitions' own ratios, so that one
repetition caught in a change of memory speed does not skew it.

  kernels_benchmark --benchmark_format=json --benchmark_repetitions=5 > k.json
  tools/kernel_ratios.py k.json
"""
import json
import statistics
import sys

TYPES = ["f32", "bf16", "f16", "int8", "int4"]


def main():
    runs = json.load(open(sys.argv[1]))["benchmarks"]
    # Single runs and repetitions, not the aggregates of them; a run that
    # kept only aggregates is read through its medians.
    singles = [r for r in runs if r.get("run_type", "iteration") == "iteration"]
    if not singles:
        singles = [r for r in runs if r.get("aggregate_name") == "median"]
    by_name = {}
    for r in singles:
        by_name.setdefault(r["run_name"], []).append(r)

    def median_of(name, key):
        values = [r[key] for r in by_name.get(name, []) if key in r]
        return statistics.median(values) if values else float("nan")

    # A filtered run may leave out a probe (NaN ratios for it).
    bandwidth = next((median_of(n, "bytes_per_second") for n in by_name
                      if n.startswith("BM_ReadBandwidth")), float("nan"))
    peak = next((median_of(n, "flops_per_second") for n in by_name
                 if n.startswith("BM_PeakFlops")), float("nan"))
    print(f"read bandwidth {bandwidth / 1e9:.1f} GB/s, "
          f"peak {peak / 1e9:.0f} GFLOP/s\n")
    print("| weights | out×in | rows n | GB/s of weights | read GB/s beside it "
          "| of bandwidth | GFLOP/s | of peak |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for name, reps in by_name.items():
        if not name.startswith("BM_MatMul/"):
            continue
        _, t, out, inp, n = name.split("/")[:5]
        gbs = median_of(name, "weight_bytes_per_second")
        fl = median_of(name, "flops_per_second")
        beside = median_of(name, "read_bytes_per_second")
        if beside != beside:  # NaN: a run without per-case probes
            beside = bandwidth
        ratio = statistics.median(
            r["weight_bytes_per_second"] / r.get("read_bytes_per_second", beside)
            for r in reps)
        # Up to 3 activation rows (decode) a product is bound by the bytes
        # it reads, with more (prefill) by FMA throughput: each row shows
        # the ratio to its own ceiling.
        if int(n) <= 3:
            print(f"| {TYPES[int(t)]} | {out}×{inp} | {n} | {gbs / 1e9:.1f} | "
                  f"{beside / 1e9:.1f} | **{ratio:.0%}** | {fl / 1e9:.1f} | |")
        else:
            print(f"| {TYPES[int(t)]} | {out}×{inp} | {n} | | | | "
                  f"{fl / 1e9:.1f} | **{fl / peak:.0%}** |")


if __name__ == "__main__":
    main()
