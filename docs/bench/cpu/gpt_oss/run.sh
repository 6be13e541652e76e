#!/bin/bash
# gpt-oss-shaped synthetic checkpoint (tools/make_synthetic_moe.py --arch
# gpt_oss, defaults: 3.23 GB, MXFP4 experts): decode at batch 1 on the
# AVX-512 path and forced AVX2 (alternating), prefill of 512 tokens, and
# bench-ring with a third of the model in the host budget.
B=/tmp/ringmoe-gptoss
M=/tmp/syn-gptoss
O=/tmp/gptossbench
for r in 1 2 3; do
  $B bench --model $M --threads 2 --prompt_tokens 1 --bench_repetitions 1 --gen_tokens 32 --batch 1 --bench_rounds 3 > $O/tg-avx512-$r.json 2>/dev/null
  RINGMOE_FORCE_AVX2=1 $B bench --model $M --threads 2 --prompt_tokens 1 --bench_repetitions 1 --gen_tokens 32 --batch 1 --bench_rounds 3 > $O/tg-avx2-$r.json 2>/dev/null
done
$B bench --model $M --threads 2 --prompt_tokens 512 --gen_tokens 4 --batch 1 --bench_rounds 1 > $O/pp512.json 2>/dev/null
$B bench-ring --model $M --host_memory_budget 1080000000 --threads 2 --prompt_tokens 512 --gen_tokens 2 > $O/ring-p512.json 2>$O/ring-p512.err
$B bench-ring --model $M --host_memory_budget 1080000000 --threads 2 --prompt_tokens 64 --gen_tokens 8 > $O/ring-p64.json 2>$O/ring-p64.err
echo done > $O/DONE
