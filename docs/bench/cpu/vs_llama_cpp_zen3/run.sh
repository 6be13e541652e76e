#!/bin/bash
# ringmoe against llama.cpp on the same weights, same machine, alternating
# every command (docs/PERFORMANCE.md, "Against llama.cpp on an AVX2-only
# CPU"). Inputs, all built or written beside the project, never in it:
#   RING   ringmoe binary (bazel build --config=opt //clients/cli:ringmoe)
#   LLAMA  directory of llama.cpp's llama-bench and llama-batched-bench
#   M      the synthetic Mixtral's safetensors directory
#   G      GGUF prefix: $G-bf16.gguf, $G-Q8_0.gguf, $G-Q4_0.gguf
#   O      output directory; ROUNDS (default 3); FORMATS (default all three)
#   ACTIVATIONS=matched  ringmoe's activations at llama.cpp's precision
#          (bf16 for bf16, one int8 level for Q8_0 and Q4_0) rather than
#          float32
set -u
: "${RING:?}" "${LLAMA:?}" "${M:?}" "${G:?}" "${O:?}"
mkdir -p "$O"
declare -A GGUF=([bf16]=bf16 [int8]=Q8_0 [int4]=Q4_0)
declare -A QUANT=([bf16]="" [int8]="--weight_dtype int8 --quantize_attention --quantize_lm_head"
                  [int4]="--weight_dtype int4 --quantize_attention --quantize_lm_head")
declare -A MATCHED=([bf16]="--activation_precision=bf16" [int8]="--activation_precision=int8"
                    [int4]="--activation_precision=int8")
spin() { bash -c 'while :; do :; done' & SPIN=$!; }
unspin() { kill "$SPIN"; wait "$SPIN" 2>/dev/null; }
for r in $(seq 1 "${ROUNDS:-3}"); do
  for f in ${FORMATS:-bf16 int8 int4}; do
    g="$G-${GGUF[$f]}.gguf"
    act=""; [ "${ACTIVATIONS:-}" = matched ] && act=${MATCHED[$f]}
    ring() { "$RING" bench --model "$M" ${QUANT[$f]} $act --threads 2 "$@" 2>/dev/null; }
    for c in 0 1; do
      [ "$c" = 1 ] && spin
      ring --prompt_tokens 512 --gen_tokens 4 --bench_rounds 1 > "$O/r$r-ring-pp512-$f-c$c.json"
      "$LLAMA/llama-bench" -m "$g" -t 2 -p 512 -n 0 -r 1 -o json > "$O/r$r-llama-pp512-$f-c$c.json" 2>/dev/null
      ring --prompt_tokens 1 --bench_repetitions 1 --gen_tokens 32 --bench_rounds 3 > "$O/r$r-ring-tg32-$f-c$c.json"
      "$LLAMA/llama-bench" -m "$g" -t 2 -p 0 -n 32 -r 3 -o json > "$O/r$r-llama-tg32-$f-c$c.json" 2>/dev/null
      [ "$c" = 1 ] && unspin
    done
    ring --prompt_tokens 128 --gen_tokens 32 --batch 8 --bench_rounds 1 > "$O/r$r-ring-b8-$f.json"
    "$LLAMA/llama-batched-bench" -m "$g" -t 2 -c 2048 -b 2048 -ub 512 -npp 128 -ntg 32 -npl 8 \
      --output-format jsonl > "$O/r$r-llama-b8-$f.jsonl" 2>/dev/null
  done
done
