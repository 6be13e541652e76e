#!/bin/bash
# usage: e2e.sh OUTDIR MODEL ROUNDS variant... ; alternates ringmoe-$variant bench
out=$1; model=$2; rounds=$3; shift 3
mkdir -p $out
for r in $(seq 1 $rounds); do
  for v in "$@"; do
    ${BIN:-.}/ringmoe-$v bench --model $model --threads 2 --prompt_tokens 1 --bench_repetitions 1 --gen_tokens 48 --batch 1 --bench_rounds 3 > $out/tg1-$v-$r.json 2>$out/tg1-$v-$r.err
  done
done
