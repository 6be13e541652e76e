#!/usr/bin/python3
"""Summarises an Nsight Compute raw CSV (ncu --csv --page raw
--print-units base, metrics gpu__time_duration.sum, dram__bytes_read.sum and
dram__bytes_write.sum) per kernel: launches, total and mean time, DRAM bytes
and the bandwidth they were moved at, largest total time first; the last
line the whole profile's.

    tools/kernel_profile.py ncu.csv [--ceiling_GBps 3000 |
        --benchmark_json forward_benchmark.json]

(the ceiling: the device copy bandwidth that forward_benchmark measured.)

    tools/kernel_profile.py ncu.csv --step_kernel EmbedKernel [--step N]

splits the launches into steps, each starting at a launch of the named
kernel (a forward pass's first), and lists every step's launches, time and
DRAM bytes after the table; with --step N the table covers step N alone.
"""
import argparse
import collections
import csv
import json
import re
import sys

TIME = "gpu__time_duration.sum"
READ = "dram__bytes_read.sum"
WRITE = "dram__bytes_write.sum"


def kernel_base(name):
    """The kernel's own name: FusedProductKernel, not its namespace,
    template arguments or parameters, from a mangled or demangled name."""
    if name.startswith("_Z"):
        # Itanium mangling: identifiers come length-prefixed (18Fused...).
        names, i = [], 0
        while i < len(name):
            digits = re.match(r"\d+", name[i:])
            if digits is None:
                i += 1
                continue
            length = int(digits.group())
            start = i + len(digits.group())
            names.append(name[start:start + length])
            i = start + length
        kernels = [n for n in names if n.endswith("Kernel")]
        if kernels:
            return kernels[-1]
    found = re.findall(r"([A-Za-z_][A-Za-z0-9_]*)\s*(?:<|\()", name)
    return found[0] if found else name


def number(text):
    text = text.replace(",", "").strip()
    try:
        return float(text)
    except ValueError:
        return None


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("csv")
    parser.add_argument("--ceiling_GBps", type=float, default=0.0)
    parser.add_argument("--benchmark_json", default="")
    parser.add_argument("--step_kernel", default="")
    parser.add_argument("--step", type=int, default=-1)
    args = parser.parse_args()
    if args.step >= 0 and not args.step_kernel:
        sys.exit("--step needs --step_kernel")
    if args.benchmark_json:
        with open(args.benchmark_json) as f:
            args.ceiling_GBps = json.load(f)["ceilings"]["device_copy_GBps"]
    with open(args.csv, newline="") as f:
        rows = list(csv.reader(f))
    header = next((i for i, r in enumerate(rows) if "Kernel Name" in r), None)
    if header is None:
        sys.exit(f"{args.csv}: no 'Kernel Name' column (not an ncu raw CSV?)")
    columns = rows[header]
    index = {name: columns.index(name) for name in
             ("Kernel Name", TIME, READ, WRITE) if name in columns}
    missing = {"Kernel Name", TIME} - index.keys()
    if missing:
        sys.exit(f"{args.csv}: missing columns {sorted(missing)}")
    # (kernel, seconds, bytes) of every launch, in launch order.
    launches = []
    for row in rows[header + 1:]:
        if len(row) < len(columns):
            continue
        seconds = number(row[index[TIME]])
        if seconds is None:  # the units row
            continue
        moved = sum(number(row[index[m]]) or 0.0
                    for m in (READ, WRITE) if m in index)
        launches.append((kernel_base(row[index["Kernel Name"]]),
                         seconds * 1e-9, moved))
    # steps[i]: the launches of step i (those before the first step's
    # kernel are left out).
    steps = []
    if args.step_kernel:
        for launch in launches:
            if launch[0] == args.step_kernel:
                steps.append([])
            if steps:
                steps[-1].append(launch)
        if not steps:
            sys.exit(f"{args.csv}: no launch of {args.step_kernel}")
    if args.step >= 0:
        if args.step >= len(steps):
            sys.exit(f"--step {args.step}: the profile has {len(steps)} steps")
        print(f"step {args.step}")
        launches = steps[args.step]
    totals = collections.defaultdict(lambda: [0, 0.0, 0.0])
    for name, seconds, moved in launches:
        entry = totals[name]
        entry[0] += 1
        entry[1] += seconds
        entry[2] += moved
    print(f"{'kernel':32s} {'launches':>8s} {'total ms':>9s} {'mean us':>8s} "
          f"{'DRAM MB':>9s} {'GB/s':>7s}" +
          ("  ÷ ceiling" if args.ceiling_GBps else ""))
    all_time = all_bytes = 0.0
    for name, (launches, seconds, moved) in sorted(
            totals.items(), key=lambda kv: -kv[1][1]):
        all_time += seconds
        all_bytes += moved
        rate = moved / seconds / 1e9 if seconds else 0.0
        line = (f"{name:32s} {launches:8d} {seconds * 1e3:9.3f} "
                f"{seconds / launches * 1e6:8.2f} {moved / 1e6:9.2f} "
                f"{rate:7.1f}")
        if args.ceiling_GBps:
            line += f"  {rate / args.ceiling_GBps:.3f}"
        print(line)
    rate = all_bytes / all_time / 1e9 if all_time else 0.0
    print(f"{'all':32s} {sum(t[0] for t in totals.values()):8d} "
          f"{all_time * 1e3:9.3f} {'':8s} {all_bytes / 1e6:9.2f} {rate:7.1f}")
    if steps and args.step < 0:
        print(f"\n{'step':>4s} {'launches':>8s} {'total us':>9s} "
              f"{'DRAM MB':>9s} {'GB/s':>7s}")
        for i, step in enumerate(steps):
            seconds = sum(t for _, t, _ in step)
            moved = sum(m for _, _, m in step)
            print(f"{i:4d} {len(step):8d} {seconds * 1e6:9.1f} "
                  f"{moved / 1e6:9.2f} "
                  f"{moved / seconds / 1e9 if seconds else 0.0:7.1f}")


if __name__ == "__main__":
    main()
