#!/bin/bash
# Old (float FMA, eb5a3e4) and new (three-level VNNI) AVX-512 mxfp4
# kernels alternating, then end to end on the synthetic gpt-oss: old MXFP4,
# new MXFP4 and int4-converted experts, alternating twice.
O=/tmp/vnnibench
F='BM_MatMul/(4|6)/(14336/4096|7168/2048|2048/7168)/1/|BM_MatMulInCache/(4|6)/|BM_ReadBandwidth'
for r in 1 2; do
  /tmp/kernels-old --benchmark_filter="$F" --benchmark_format=json > $O/kernels-old-$r.json 2>/dev/null
  /tmp/kernels-new --benchmark_filter="$F" --benchmark_format=json > $O/kernels-new-$r.json 2>/dev/null
done
M=/tmp/syn-gptoss
A="--threads 2 --prompt_tokens 1 --bench_repetitions 1 --gen_tokens 32 --batch 1 --bench_rounds 3"
for r in 1 2; do
  /tmp/ringmoe-old bench --model $M $A > $O/e2e-old-mxfp4-$r.json 2>/dev/null
  /tmp/ringmoe-gptoss bench --model $M $A > $O/e2e-new-mxfp4-$r.json 2>/dev/null
  /tmp/ringmoe-gptoss bench --model $M --weight_dtype int4 $A > $O/e2e-int4-$r.json 2>/dev/null
done
