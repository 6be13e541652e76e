#!/usr/bin/env bash
# all_to_all_benchmark cannot rot: one small configuration under mpirun with
# 2 ranks (flat) and 4 ranks on two pretend nodes (flat and hierarchical),
# a few repetitions each; the JSON must parse, hold the figures
# docs/PERFORMANCE.md quotes, and its counts must make sense (the
# hierarchical all-to-all sends at most as many row messages between nodes
# per node pair as the flat one, and at most one per AllToAllV; its counts
# travel once per layer, in the executor's gather, so a layer costs its
# base 1 + 2 x 3 collectives and no more control messages than flat;
# replicated attention's AllGatherV sends exactly its minimum).
#
# Usage: all_to_all_benchmark_test.sh MPIRUN_TEST_SH BENCHMARK
set -uo pipefail

mpirun_test=$1
benchmark=$2
out=${TEST_TMPDIR:-$(mktemp -d)}
failures=0

# run NP JSON [ARG...]
run() {
  local np=$1 json=$2
  shift 2
  echo "=== $np ranks: $*"
  if ! MPI_JOB_SECONDS=40 "$mpirun_test" "$np" "$benchmark" \
      --json_out="$json" --tokens 4 --shapes mixtral --warmup 2 --reps 4 \
      --min_reps 3 --ceiling_mib 1 --ceiling_reps 2 --latency_reps 5 "$@"; then
    echo "FAIL: the benchmark with $np ranks exited non-zero"
    failures=$((failures + 1))
  fi
}

run 2 "$out/np2.json"
run 4 "$out/np4.json" --ranks_per_node 2

/usr/bin/python3 - "$out/np2.json" "$out/np4.json" <<'EOF' || failures=$((failures + 1))
import json
import sys

problems = []


def check(ok, what):
    if not ok:
        problems.append(what)


for path, ranks, hierarchical in ((sys.argv[1], 2, False),
                                  (sys.argv[2], 4, True)):
    with open(path) as f:
        result = json.load(f)
    check(result["ranks"] == ranks, f"{path}: ranks {result['ranks']}")
    ceilings = result["ceilings"]
    for probe in ("barrier", "alltoall_8_bytes_per_peer", "alltoallv_large"):
        check(ceilings[probe]["median_us"] > 0, f"{path}: ceiling {probe}")
    check(ceilings["alltoallv_large"]["send_bandwidth_per_rank_GBps"] > 0,
          f"{path}: bandwidth ceiling")
    configs = result["configurations"]
    kinds = {(c["attention"], c["all_to_all"]) for c in configs}
    expected = {("data_parallel", "flat"), ("replicated", "flat")}
    if hierarchical:
        expected.add(("data_parallel", "hierarchical"))
    check(kinds == expected, f"{path}: configurations {sorted(kinds)}")
    for c in configs:
        name = f"{path}: {c['attention']} {c['all_to_all']}"
        check(c["repetitions"] >= 3, f"{name}: repetitions")
        latency = c["latency"]
        check(0 < latency["layer_exchange"]["median_us"]
              <= latency["layer_exchange"]["p90_us"], f"{name}: latency")
        check(len(latency["collectives"]) ==
              (1 if c["attention"] == "replicated" else 3),
              f"{name}: collectives")
        b = c["bytes_per_token_per_rank"]
        check(b["naive_minimum"] == 4096 * 2 * 4, f"{name}: naive minimum")
        check(0 < b["remote_fraction"] <= 1, f"{name}: remote fraction")
        if c["attention"] == "data_parallel":
            # Rows carry one extra float (the expert id) and the counts
            # travel too: never below the round trip's minimum, and only
            # a little above it when flat.
            ratio = b["measured_over_round_trip_minimum"]
            check(ratio >= 1, f"{name}: below the minimum ({ratio})")
            if c["all_to_all"] == "flat":
                check(ratio < 1.1, f"{name}: flat bytes {ratio} x minimum")
        else:
            # One AllGatherV: each rank sends its own experts' rows to each
            # other rank, nothing more (no padding to the largest share).
            check(abs(b["measured"] - b["replicated_minimum"])
                  <= 1e-9 * b["replicated_minimum"],
                  f"{name}: replicated bytes {b['measured']} against the "
                  f"minimum {b['replicated_minimum']}")
        m = c["messages_per_layer_per_rank"]
        check(0 < m["flat"]["total"] <= 3 * (ranks - 1),
              f"{name}: flat messages {m['flat']['total']}")
        if hierarchical:
            x = c["between_node_messages_per_node_pair_per_layer"]
            check(x["nodes"] == 2, f"{name}: nodes")
            check(x["flat_data"] > 0, f"{name}: flat between-node messages")
            if c["all_to_all"] == "hierarchical":
                check(x["hierarchical_data"] <= x["flat_data"],
                      f"{name}: hierarchical {x['hierarchical_data']} > "
                      f"flat {x['flat_data']} between-node messages")
                check(0 < x["hierarchical_data"] <= 2,
                      f"{name}: {x['hierarchical_data']} between-node "
                      "messages per node pair (one per AllToAllV at most)")
                check("hierarchical" in m, f"{name}: hierarchical messages")
                h = m["hierarchical"]
                check(h["row counts AllGather (flat, logical)"] == ranks - 1,
                      f"{name}: hierarchical count messages "
                      f"{h['row counts AllGather (flat, logical)']}")
                check(x["hierarchical_control"] == x["flat_control"],
                      f"{name}: hierarchical control "
                      f"{x['hierarchical_control']} between nodes per pair, "
                      f"flat {x['flat_control']}")
                base = c["hierarchical_base_collectives_per_layer"]
                check(base == 1 + 2 * 3,
                      f"{name}: {base} collectives of the base per layer "
                      "(the gather of row counts and 3 phases per AllToAllV "
                      "expected)")

for p in problems:
    print("FAIL:", p)
sys.exit(1 if problems else 0)
EOF

if [[ $failures -ne 0 ]]; then
  echo "$failures failure(s)"
  exit 1
fi
echo "PASS"
