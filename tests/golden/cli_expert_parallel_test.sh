#!/usr/bin/env bash
# `mpirun -np NP ringmoe logits|generate ... --expert_parallel` writes and
# prints exactly what one process does: the logits file byte for byte and
# the greedy tokens of every golden tiny model, and the demo model's
# streamed text (rank 0 alone prints); attention replicated and (logits,
# the demo) data-parallel, and with a balanced placement file with replicas
# written and read back (the demo's text; two models' logits in both
# attention modes), and through pretend nodes (--ranks_per_node).
# Started alone, --expert_parallel changes nothing. Bazel may shard it
# (TEST_TOTAL_SHARDS, TEST_SHARD_INDEX).
#
# Usage: cli_expert_parallel_test.sh MPIRUN_TEST_SH RINGMOE NP
set -uo pipefail

mpirun_test=$1
ringmoe=$2
np=$3
tmp=${TEST_TMPDIR:-$(mktemp -d)}
failures=0

# Bazel's test sharding: the checks are numbered units and shard I of N runs
# the units whose number is I modulo N, so a slow configuration (ASan, 4
# ranks on 2 cores) stays well inside each shard's time limit.
shards=${TEST_TOTAL_SHARDS:-1}
shard=${TEST_SHARD_INDEX:-0}
[[ -n ${TEST_SHARD_STATUS_FILE:-} ]] && touch "$TEST_SHARD_STATUS_FILE"
unit=-1
# mine: takes the next unit number; true when this shard runs that unit.
mine() {
  unit=$((unit + 1))
  ((unit % shards == shard))
}

fail() {
  echo "FAIL $*"
  failures=$((failures + 1))
}

# same NAME ONE SPREAD: the one-process and expert-parallel outputs agree.
same() {
  if ! cmp -s "$2" "$3"; then
    fail "$1: $np ranks differ from one process"
    head -c 300 "$2"
    echo
    head -c 300 "$3"
    echo
  fi
}

ids=3,17,200,5,88,411,9
# alone MODEL: one process's logits of ids for MODEL, in $tmp/MODEL.one.*.
alone() {
  [[ -f $tmp/$1.one.safetensors ]] ||
    "$ringmoe" logits --model "tests/testdata/moe-tiny/$1" --threads 1 \
      --input_ids "$ids" --out "$tmp/$1.one.safetensors" ||
    fail "$1 logits alone"
}
for model in mixtral mixtral_sharded qwen2_moe qwen3_moe olmoe deepseek_v3 \
  deepseek_v3_fp8 deepseek_v2_lite gpt_oss gpt_oss_bf16; do
  mine || continue
  engine=(--model "tests/testdata/moe-tiny/$model" --threads 1)
  alone "$model"
  "$mpirun_test" "$np" "$ringmoe" logits "${engine[@]}" --input_ids "$ids" \
    --out "$tmp/$model.spread.safetensors" --expert_parallel ||
    fail "$model logits on $np ranks"
  same "$model logits" "$tmp/$model.one.safetensors" \
    "$tmp/$model.spread.safetensors"
  "$mpirun_test" "$np" "$ringmoe" logits "${engine[@]}" --input_ids "$ids" \
    --out "$tmp/$model.dp.safetensors" --expert_parallel \
    --expert_parallel_attention data_parallel ||
    fail "$model logits on $np ranks, attention data-parallel"
  same "$model logits, attention data-parallel" \
    "$tmp/$model.one.safetensors" "$tmp/$model.dp.safetensors"

  generate=(generate "${engine[@]}" --input_ids "$ids" --max_tokens 4
    --ignore_eos --json)
  "$ringmoe" "${generate[@]}" >"$tmp/$model.one.json" ||
    fail "$model generate alone"
  "$mpirun_test" "$np" "$ringmoe" "${generate[@]}" --expert_parallel \
    >"$tmp/$model.spread.json" || fail "$model generate on $np ranks"
  same "$model generate" "$tmp/$model.one.json" "$tmp/$model.spread.json"
done

adder=(generate --model tests/testdata/moe-adder --threads 1
  --prompt "37+485=" --max_tokens 6 --stream)
# adder_alone: one process's streamed text of the demo model.
adder_alone() {
  [[ -f $tmp/adder.one.txt ]] ||
    "$ringmoe" "${adder[@]}" >"$tmp/adder.one.txt" || fail "moe-adder alone"
}
if mine; then
  adder_alone
  "$mpirun_test" "$np" "$ringmoe" "${adder[@]}" --expert_parallel \
    >"$tmp/adder.spread.txt" || fail "moe-adder on $np ranks"
  same "moe-adder streamed text" "$tmp/adder.one.txt" "$tmp/adder.spread.txt"
  "$mpirun_test" "$np" "$ringmoe" "${adder[@]}" --expert_parallel \
    --expert_parallel_attention data_parallel >"$tmp/adder.dp.txt" ||
    fail "moe-adder on $np ranks, attention data-parallel"
  same "moe-adder streamed text, attention data-parallel" \
    "$tmp/adder.one.txt" "$tmp/adder.dp.txt"
fi
# Hierarchical all-to-all: pretend nodes of 2 ranks (with 4 ranks, 2 nodes
# exchange through their leaders; with 2, one node: flat).
for model in mixtral deepseek_v3_fp8; do
  mine || continue
  alone "$model"
  "$mpirun_test" "$np" "$ringmoe" logits --model "tests/testdata/moe-tiny/$model" \
    --threads 1 --input_ids "$ids" --out "$tmp/$model.hier.safetensors" \
    --expert_parallel --expert_parallel_attention data_parallel \
    --ranks_per_node 2 2>"$tmp/$model.hier.err" ||
    fail "$model logits on $np ranks, 2 per node"
  same "$model logits, 2 ranks per node" "$tmp/$model.one.safetensors" \
    "$tmp/$model.hier.safetensors"
  if ((np >= 4)); then
    grep -q "hierarchical all-to-all over nodes {0,1} {2,3}" \
      "$tmp/$model.hier.err" || fail "$model: not hierarchical"
  fi
done
if mine; then
  adder_alone
  "$mpirun_test" "$np" "$ringmoe" "${adder[@]}" --expert_parallel \
    --expert_parallel_attention data_parallel --ranks_per_node 2 \
    >"$tmp/adder.hier.txt" || fail "moe-adder on $np ranks, 2 per node"
  same "moe-adder streamed text, 2 ranks per node" "$tmp/adder.one.txt" \
    "$tmp/adder.hier.txt"
fi

# A placement balanced by the first run's routed tokens, with replicas of
# the two hottest experts, written by rank 0 and read back by the next run.
if mine; then
  adder_alone
  placement=(--expert_parallel --expert_parallel_attention data_parallel
    --expert_placement_file "$tmp/placement.txt" --expert_replicas 2)
  for run in first second; do
    "$mpirun_test" "$np" "$ringmoe" "${adder[@]}" "${placement[@]}" \
      >"$tmp/adder.$run.txt" 2>"$tmp/adder.$run.err" ||
      fail "moe-adder on $np ranks with a placement file ($run run)"
    same "moe-adder streamed text, placement file ($run run)" \
      "$tmp/adder.one.txt" "$tmp/adder.$run.txt"
    grep -q "^ringmoe-expert-placement 1" "$tmp/placement.txt" ||
      fail "no placement file after the $run run"
  done
  grep -q "expert placement ($tmp/placement.txt)" "$tmp/adder.second.err" ||
    fail "the second run did not read the placement file: $(cat "$tmp/adder.second.err")"
  [[ $(grep -cE "^[0-9]+: [0-9]+ [0-9]+" "$tmp/placement.txt") -eq 2 ]] ||
    fail "not 2 replicated experts: $(cat "$tmp/placement.txt")"
fi
# Logits with replicas, both attention modes: each replicated expert runs
# whole on one copy, so the logits are one process's byte for byte (a split
# of an expert's rows would sum its products in another order). The first
# run writes the placement, the second runs with its replicas.
long_ids=3,17,200,5,88,411,9,12,55,300,7,1,99,150
for model in mixtral gpt_oss; do
  mine || continue
  engine=(logits --model "tests/testdata/moe-tiny/$model" --threads 1
    --input_ids "$long_ids")
  "$ringmoe" "${engine[@]}" --out "$tmp/$model.long.safetensors" ||
    fail "$model logits alone (long)"
  for attention in replicated data_parallel; do
    rm -f "$tmp/$model.placement.txt"
    for run in first second; do
      "$mpirun_test" "$np" "$ringmoe" "${engine[@]}" --expert_parallel \
        --expert_parallel_attention "$attention" \
        --expert_placement_file "$tmp/$model.placement.txt" \
        --expert_replicas "$np" --out "$tmp/$model.replicas.safetensors" \
        2>"$tmp/$model.replicas.err" ||
        fail "$model logits on $np ranks with replicas ($attention, $run run)"
    done
    grep -q "replicated:" "$tmp/$model.placement.txt" ||
      fail "$model: no replicas in $(cat "$tmp/$model.placement.txt")"
    same "$model logits with replicas, attention $attention" \
      "$tmp/$model.long.safetensors" "$tmp/$model.replicas.safetensors"
  done
done

if mine; then
  adder_alone
  echo "experts 3" >"$tmp/bad_placement.txt"
  "$mpirun_test" "$np" "$ringmoe" "${adder[@]}" --expert_parallel \
    --expert_placement_file "$tmp/bad_placement.txt" \
    2>"$tmp/bad_placement.err" &&
    fail "a malformed placement file was accepted"
  grep -q "bad_placement.txt" "$tmp/bad_placement.err" ||
    fail "malformed placement file: $(cat "$tmp/bad_placement.err")"

  "$ringmoe" "${adder[@]}" --expert_parallel \
    --expert_parallel_attention sideways 2>"$tmp/bad_flag.txt" &&
    fail "--expert_parallel_attention sideways accepted"
  grep -q "must be replicated or data_parallel" "$tmp/bad_flag.txt" ||
    fail "--expert_parallel_attention sideways: $(cat "$tmp/bad_flag.txt")"
  for bad in "--expert_replicas -1" "--ranks_per_node -2"; do
    # shellcheck disable=SC2086 # the flag and its value
    "$ringmoe" "${adder[@]}" --expert_parallel $bad 2>"$tmp/bad_flag.txt" &&
      fail "$bad accepted"
    grep -qF -- "${bad%% *} must be >= 0" "$tmp/bad_flag.txt" ||
      fail "$bad: $(cat "$tmp/bad_flag.txt")"
  done
  "$ringmoe" "${adder[@]}" --expert_parallel >"$tmp/adder.flag.txt" ||
    fail "moe-adder alone with --expert_parallel"
  same "moe-adder alone with --expert_parallel" "$tmp/adder.one.txt" \
    "$tmp/adder.flag.txt"
  grep -q "^522" "$tmp/adder.one.txt" ||
    fail "moe-adder: $(cat "$tmp/adder.one.txt")"
fi

# Every unit belongs to some shard only if there are no more shards than
# units.
((shards <= unit + 1)) || fail "$shards shards for $((unit + 1)) units"
echo "$failures failures"
[[ $failures -eq 0 ]]
