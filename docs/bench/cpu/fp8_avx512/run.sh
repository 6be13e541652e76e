#!/bin/bash
# FP8 decode, batch 1, on the synthetic DeepSeek-V3 FP8 checkpoint: the
# AVX-512 one-row fp8 products against the AVX2 ones (RINGMOE_FORCE_AVX2=1),
# same binary, alternating.
B=/tmp/ringmoe-fp8avx512
D=/tmp/syn-ds3
O=/tmp/fp8bench
for r in 1 2 3 4; do
  RINGMOE_FORCE_AVX2=1 $B bench --model $D --threads 2 --prompt_tokens 1 --bench_repetitions 1 --gen_tokens 48 --batch 1 --bench_rounds 3 > $O/avx2-$r.json 2>/dev/null
  $B bench --model $D --threads 2 --prompt_tokens 1 --bench_repetitions 1 --gen_tokens 48 --batch 1 --bench_rounds 3 > $O/avx512-$r.json 2>/dev/null
done
echo done > $O/DONE
