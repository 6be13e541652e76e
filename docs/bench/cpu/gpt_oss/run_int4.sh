#!/bin/bash
# The same model with the experts converted to int4 at load
# (--weight_dtype int4: the experts only, as attention and lm_head stay
# BF16), alternating with MXFP4 as shipped; then the product kernels.
B=/tmp/ringmoe-gptoss
M=/tmp/syn-gptoss
O=/tmp/gptossbench
for r in 1 2; do
  $B bench --model $M --threads 2 --prompt_tokens 1 --bench_repetitions 1 --gen_tokens 32 --batch 1 --bench_rounds 3 > $O/cmp-mxfp4-$r.json 2>/dev/null
  $B bench --model $M --weight_dtype int4 --threads 2 --prompt_tokens 1 --bench_repetitions 1 --gen_tokens 32 --batch 1 --bench_rounds 3 > $O/cmp-int4-$r.json 2>/dev/null
done
/work/main/bazel-bin/kernels/cpu/kernels_benchmark --benchmark_filter='BM_MatMul(Avx2)?/(4|6)/(14336/4096|7168/2048|2048/7168)/1/' --benchmark_format=json > $O/kernels.json 2>/dev/null
echo done > $O/DONE2
