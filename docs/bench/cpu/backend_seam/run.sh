#!/bin/bash
# Same-run, alternating: before the backend seam (602cc5b) and after, on the
# synthetic Mixtral (decode b1, prefill 512, decode b8) and the synthetic
# DeepSeek-V3 FP8 (decode b1).
M=/work/llama-work/syn12
D=/tmp/syn-ds3
O=/tmp/seambench
for r in 1 2 3; do
 for v in before after; do
  /tmp/ringmoe-seam-$v bench --model $M --threads 2 --prompt_tokens 1 --bench_repetitions 1 --gen_tokens 32 --batch 1 --bench_rounds 4 > $O/tg-$v-$r.json 2>/dev/null
  /tmp/ringmoe-seam-$v bench --model $M --threads 2 --prompt_tokens 512 --gen_tokens 4 --batch 1 --bench_rounds 1 > $O/pp-$v-$r.json 2>/dev/null
  /tmp/ringmoe-seam-$v bench --model $M --threads 2 --prompt_tokens 128 --gen_tokens 32 --batch 8 --bench_rounds 2 > $O/b8-$v-$r.json 2>/dev/null
  /tmp/ringmoe-seam-$v bench --model $D --threads 2 --prompt_tokens 1 --bench_repetitions 1 --gen_tokens 32 --batch 1 --bench_rounds 3 > $O/fp8-$v-$r.json 2>/dev/null
 done
done
echo done > $O/DONE
