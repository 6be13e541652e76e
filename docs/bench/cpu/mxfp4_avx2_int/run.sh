#!/bin/bash
# Synthetic gpt-oss (tools/make_synthetic_moe.py --arch gpt_oss, 3.23 GB,
# MXFP4 experts), 2 threads, Zen 3 (AVX2 only): decode at batch 1 and with 8
# sequences, alternating the build before the AVX2 three-level kernels
# (OLD), the build with them (NEW) and NEW with the experts converted to
# int4 at load. The product kernels' figures (kernels_*.txt) are
# kernels_benchmark runs alternating builds (weight GB/s):
#   kernels_rows_1_to_4.txt: kb_one (integer path for one row only) and
#     kb_three (up to three rows), filter
#     'BM_MatMul/(4|6)/(14336/4096|2048/768|7168/2048)/(1|2|3|4)/';
#   kernels_integer_vs_blocked.txt: kb_direct1 (mxfp4 blocked from two
#     rows) and kb_direct32 (integer up to 32 rows), filter
#     'BM_MatMul/6/(7168/2048|2048/768|14336/4096)/(2|3|4|8|16|32)/'.
M=${M:-/work/models/gptoss}
O=${O:-.}
for r in 1 2 3; do
  for v in old new int4; do
    B=$NEW; X=""
    [ $v = old ] && B=$OLD
    [ $v = int4 ] && X="--weight_dtype int4"
    $B bench --model $M $X --threads 2 --prompt_tokens 1 --bench_repetitions 1 --gen_tokens 32 --batch 1 --bench_rounds 3 > $O/tg1-$v-$r.json 2>/dev/null
    $B bench --model $M $X --threads 2 --prompt_tokens 1 --bench_repetitions 1 --gen_tokens 16 --batch 8 --bench_rounds 2 > $O/tg8-$v-$r.json 2>/dev/null
  done
done
