#!/bin/bash
# ringmoe against llama.cpp on the synthetic gpt-oss, MXFP4 experts on both
# sides, same machine, alternating every command (docs/PERFORMANCE.md,
# "Against llama.cpp with MXFP4 experts"). ringmoe runs once per
# --activation_precision in PRECISIONS (default "f32 int8": exact, and one
# int8 level for the mxfp4 products as llama.cpp's Q8_0). Inputs, all built
# or written beside the project, never in it:
#   RING   ringmoe binary (bazel build --config=opt //clients/cli:ringmoe)
#   LLAMA  directory of llama.cpp's llama-bench and llama-batched-bench
#   M      the synthetic gpt-oss's safetensors directory
#          (tools/make_synthetic_moe.py --arch gpt_oss)
#   G      the same weights as GGUF (experts MXFP4, the rest BF16)
#   O      output directory; ROUNDS (default 3)
set -u
: "${RING:?}" "${LLAMA:?}" "${M:?}" "${G:?}" "${O:?}"
mkdir -p "$O"
spin() { bash -c 'while :; do :; done' & SPIN=$!; }
unspin() { kill "$SPIN"; wait "$SPIN" 2>/dev/null; }
# Each ringmoe run's stderr beside its JSON (two of 31 runs in the first
# measurements left no JSON, their stderr discarded).
ring() { local out=$1; shift; "$RING" bench --model "$M" --threads 2 "$@" > "$out" 2> "${out%.json}.err"; }
P=${PRECISIONS:-f32 int8}
for r in $(seq 1 "${ROUNDS:-3}"); do
  for c in 0 1; do
    [ "$c" = 1 ] && spin
    for p in $P; do
      ring "$O/r$r-ring-$p-pp512-c$c.json" --activation_precision=$p --prompt_tokens 512 \
        --gen_tokens 4 --bench_rounds 1
    done
    "$LLAMA/llama-bench" -m "$G" -t 2 -p 512 -n 0 -r 1 -o json > "$O/r$r-llama-pp512-c$c.json" 2>/dev/null
    for p in $P; do
      ring "$O/r$r-ring-$p-tg32-c$c.json" --activation_precision=$p --prompt_tokens 1 \
        --bench_repetitions 1 --gen_tokens 32 --bench_rounds 3
    done
    "$LLAMA/llama-bench" -m "$G" -t 2 -p 0 -n 32 -r 3 -o json > "$O/r$r-llama-tg32-c$c.json" 2>/dev/null
    [ "$c" = 1 ] && unspin
  done
  for p in $P; do
    ring "$O/r$r-ring-$p-b8.json" --activation_precision=$p --prompt_tokens 128 --gen_tokens 32 \
      --batch 8 --bench_rounds 1
  done
  "$LLAMA/llama-batched-bench" -m "$G" -t 2 -c 2048 -b 2048 -ub 512 -npp 128 -ntg 32 -npl 8 \
    --output-format jsonl > "$O/r$r-llama-b8.jsonl" 2>/dev/null
done
