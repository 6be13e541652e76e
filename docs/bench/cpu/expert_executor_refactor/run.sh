#!/bin/bash
# Same-run, alternating: the commit before the ExpertExecutor refactor
# (5395092, "before") and HEAD ("after") on the synthetic Mixtral; then the
# FP8 decode products before (the commit before them) and after on the
# synthetic DeepSeek-V3 FP8 checkpoint.
M=/work/llama-work/syn12
D=/tmp/syn-ds3
O=/tmp/execbench
for r in 1 2 3; do
 for v in before-executor head; do
  /tmp/ringmoe-$v bench --model $M --threads 2 --prompt_tokens 1 --bench_repetitions 1 --gen_tokens 32 --batch 1 --bench_rounds 4 > $O/tg-$v-$r.json 2>/dev/null
  /tmp/ringmoe-$v bench --model $M --threads 2 --prompt_tokens 512 --gen_tokens 4 --batch 1 --bench_rounds 1 > $O/pp-$v-$r.json 2>/dev/null
  /tmp/ringmoe-$v bench --model $M --threads 2 --prompt_tokens 128 --gen_tokens 32 --batch 8 --bench_rounds 2 > $O/b8-$v-$r.json 2>/dev/null
 done
 for v in old new; do
  /tmp/ringmoe-$v bench --model $D --threads 2 --prompt_tokens 1 --bench_repetitions 1 --gen_tokens 32 --batch 1 --bench_rounds 3 > $O/fp8-$v-$r.json 2>/dev/null
 done
done
echo done > $O/DONE
