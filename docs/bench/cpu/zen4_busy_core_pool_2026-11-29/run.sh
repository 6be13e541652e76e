#!/bin/bash
# Decode at batch 1 with and without a process spinning on one of the two
# cores, two ringmoe builds alternated (docs/PERFORMANCE.md, "A worker that
# lost its core"). Inputs: OLD and NEW ringmoe binaries, M the synthetic
# Mixtral's safetensors directory, O the output directory.
set -u
: "${OLD:?}" "${NEW:?}" "${M:?}" "${O:?}"
mkdir -p "$O"
declare -A RING=([old]=$OLD [new]=$NEW)
declare -A Q=([bf16]="--activation_precision=bf16"
              [int8]="--weight_dtype int8 --quantize_attention --quantize_lm_head --activation_precision=int8"
              [int4]="--weight_dtype int4 --quantize_attention --quantize_lm_head --activation_precision=int8")
for r in 1 2 3; do for f in bf16 int8 int4; do for v in old new; do for c in 0 1; do
  [ "$c" = 1 ] && { bash -c 'while :; do :; done' & SPIN=$!; }
  "${RING[$v]}" bench --model "$M" ${Q[$f]} --threads 2 --prompt_tokens 1 --bench_repetitions 1 \
    --gen_tokens 32 --bench_rounds 3 2>/dev/null > "$O/r$r-$v-$f-c$c.json"
  [ "$c" = 1 ] && { kill "$SPIN"; wait "$SPIN" 2>/dev/null; }
done; done; done; done
