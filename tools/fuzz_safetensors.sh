#!/usr/bin/env bash
# Builds the safetensors header fuzzer with clang's libFuzzer and ASan, and
# runs it on the seed corpus.
#
#   tools/fuzz_safetensors.sh [SECONDS] [extra libFuzzer flags...]
#
# SECONDS defaults to 60. New inputs go to a scratch corpus (the checked-in
# seeds in tests/fuzz/corpus/safetensors are only read); crashes are written
# to $FUZZ_OUT (default /tmp/ringmoe-fuzz-safetensors) as crash-*; replay one
# with `$FUZZ_OUT/safetensors_fuzzer CRASH_FILE`, or through the Bazel replay
# test: bazel run //tests/fuzz:safetensors_fuzz_replay_test -- CRASH_FILE.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds="${1:-60}"
shift || true
out="${FUZZ_OUT:-/tmp/ringmoe-fuzz-safetensors}"
cxx="${CXX_FUZZ:-clang++}"
mkdir -p "$out/corpus" "$out/artifacts"

binary="$out/safetensors_fuzzer"
echo "building $binary with $cxx"
# shellcheck disable=SC2046  # pkg-config output is a list of flags
"$cxx" -std=c++17 -O1 -g -fno-omit-frame-pointer \
  -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -I. \
  base/file.cc \
  base/json.cc \
  engine/checkpoint/dtype.cc \
  engine/checkpoint/safetensors.cc \
  engine/tokenizer/utf8.cc \
  tests/fuzz/safetensors_fuzzer.cc \
  $(pkg-config --cflags --libs absl_status absl_statusor absl_strings \
      absl_str_format absl_flat_hash_map absl_flat_hash_set) \
  -o "$binary"

echo "fuzzing for ${seconds}s (scratch corpus $out/corpus)"
status=0
ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}" "$binary" \
  -max_total_time="$seconds" \
  -max_len=4096 \
  -timeout=10 \
  -rss_limit_mb=2048 \
  -print_final_stats=1 \
  -dict=tests/fuzz/safetensors.dict \
  -artifact_prefix="$out/artifacts/" \
  "$@" \
  "$out/corpus" tests/fuzz/corpus/safetensors || status=$?

crashes=$(find "$out/artifacts" -type f | wc -l)
echo "corpus: $(find "$out/corpus" -type f | wc -l) inputs; artifacts: $crashes"
if ((status != 0 || crashes != 0)); then
  echo "FUZZING FOUND A PROBLEM (exit $status); see $out/artifacts" >&2
  exit 1
fi
echo "no crashes"
