#!/bin/bash
M=/work/llama-work/syn12
for r in 1 2 3; do
 for v in old new; do
  /tmp/ringmoe-$v bench --model $M --threads 2 --prompt_tokens 1 --bench_repetitions 1 --gen_tokens 32 --batch 1 --bench_rounds 4 > /tmp/refbench/tg-$v-$r.json 2>/dev/null
  /tmp/ringmoe-$v bench --model $M --threads 2 --prompt_tokens 512 --gen_tokens 4 --batch 1 --bench_rounds 1 > /tmp/refbench/pp-$v-$r.json 2>/dev/null
  /tmp/ringmoe-$v bench --model $M --threads 2 --prompt_tokens 128 --gen_tokens 32 --batch 8 --bench_rounds 2 > /tmp/refbench/b8-$v-$r.json 2>/dev/null
 done
done
echo done > /tmp/refbench/DONE
