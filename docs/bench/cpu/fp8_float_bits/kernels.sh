#!/bin/bash
# alternate variants of kernels_benchmark on fp8 shapes
F='BM_MatMulInCache/5/|BM_MatMul/5/(7168/2048|768/2048|2048/7168|14336/4096)/(1|2|3)/'
out=$1; shift
mkdir -p $out
for round in 1 2; do
  for v in "$@"; do
    ${BIN:-.}/$v --benchmark_filter="$F" --benchmark_min_time=0.3 --benchmark_format=json > $out/$v-$round.json 2>/dev/null
  done
done
