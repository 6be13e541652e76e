#!/usr/bin/env bash
# Builds the fuzz targets of tests/fuzz with clang's libFuzzer, ASan and
# UBSan, and fuzzes each for a while.
#
#   tools/fuzz.sh [SECONDS_PER_TARGET] [TARGET...] [-- LIBFUZZER_FLAGS...]
#
# SECONDS_PER_TARGET defaults to 60; TARGETs (default: all) are among
# safetensors config tokenizer chat_template openai_request kserve_request
# (`tools/fuzz.sh 60 safetensors` is what tools/fuzz_safetensors.sh 60 was).
#
# Each target's sources are its Bazel closure (bazel query on
# //tests/fuzz:<target>_fuzzer), compiled here with clang outside Bazel, CPU
# only: CUDA sources are left out, as a build without a toolkit leaves them.
# Objects are kept in $FUZZ_OUT/obj (default /tmp/ringmoe-fuzz) and rebuilt
# when a source or a header they include changes. Fuzzing starts from a
# scratch copy of tests/fuzz/corpus/<target> (the checked-in seeds are only
# read); crashes go to $FUZZ_OUT/<target>/artifacts as crash-*, leak-*,
# timeout-* or oom-*. Replay one with `$FUZZ_OUT/bin/<target>_fuzzer FILE`,
# or through Bazel: bazel run //tests/fuzz:<target>_fuzz_replay_test -- FILE;
# then add it as tests/fuzz/corpus/<target>/regression_<what>.
#
# Prints one line per target (execs, exec/s, new corpus entries, crashes);
# exits 1 if any target crashed, 2 if a build failed.
set -euo pipefail
cd "$(dirname "$0")/.."

all_targets=(safetensors config tokenizer chat_template openai_request
  kserve_request)
seconds=60
if [[ $# -gt 0 && $1 =~ ^[0-9]+$ ]]; then
  seconds=$1
  shift
fi
targets=()
while [[ $# -gt 0 && $1 != -- ]]; do
  targets+=("$1")
  shift
done
[[ $# -gt 0 ]] && shift # the --
((${#targets[@]})) || targets=("${all_targets[@]}")
for t in "${targets[@]}"; do
  [[ " ${all_targets[*]} " == *" $t "* ]] || {
    echo "unknown target $t (targets: ${all_targets[*]})" >&2
    exit 2
  }
done

out="${FUZZ_OUT:-/tmp/ringmoe-fuzz}"
cxx="${CXX_FUZZ:-clang++}"
jobs="${FUZZ_JOBS:-2}"
bazel="${BAZEL:-bazel}"
mkdir -p "$out/obj" "$out/bin"

# The same pkg-config modules as the WORKSPACE's system_libs.
modules="absl_base absl_cleanup absl_flat_hash_map absl_flat_hash_set \
absl_hash absl_random_random absl_span absl_status absl_statusor \
absl_str_format absl_strings absl_synchronization absl_time nlohmann_json \
icu-uc libpcre2-8 protobuf"
# shellcheck disable=SC2086  # lists of flags
read -r -a cflags <<<"$(pkg-config --cflags $modules)"
read -r -a libs <<<"$(pkg-config --libs $modules)"
common=(-std=c++17 -O1 -g -fno-omit-frame-pointer
  -fsanitize=fuzzer-no-link,address,undefined
  -fno-sanitize-recover=undefined -I. -Ibazel-bin "${cflags[@]}")

# Compiles $1 (a source path, relative) to its object unless that is newer
# than the source and every header it included last time.
compile() {
  local src=$1 obj="$out/obj/${1%.*}.o" extra=()
  if [[ -f $obj && -f $obj.d ]]; then
    local stale=0 dep
    for dep in $(sed -e 's/^[^:]*://' -e 's/\\$//' "$obj.d"); do
      [[ $dep -nt $obj ]] && stale=1 && break
    done
    ((stale)) || return 0
  fi
  case "$src" in
    kernels/cpu/avx2_*) extra=(-mavx2 -mfma -mf16c) ;;
    kernels/cpu/avx512*) extra=(-mavx512f -mavx512bw -mavx512vl -mavx512vnni
      -mf16c) ;;
  esac
  mkdir -p "$(dirname "$obj")"
  if [[ $src == kernels/cpu/cpu_features.cc ]]; then
    # clang 14's __builtin_cpu_supports knows no "f16c": gcc builds this one
    # file (uninstrumented, which only loses coverage of CPU detection).
    "${CXX_PLAIN:-g++}" -std=c++17 -O1 -g -I. -MMD -MF "$obj.d" -c "$src" \
      -o "$obj"
    return
  fi
  "$cxx" "${common[@]}" "${extra[@]}" -MMD -MF "$obj.d" -c "$src" -o "$obj"
}
export -f compile
export out cxx
export COMMON_FLAGS="${common[*]}"

build() {
  local target=$1
  # Generated sources (the KServe proto) come from Bazel, and building the
  # library first checks the closure compiles at all.
  "$bazel" build --ui_event_filters=-info,-progress --noshow_progress \
    "//tests/fuzz:${target}_fuzzer" >&2
  local srcs=()
  while read -r label; do
    local path="${label#//}"
    path="${path/://}"
    case "$path" in
      *.proto) srcs+=("bazel-bin/${path%.proto}.pb.cc") ;;
      kernels/cuda/* | *.cu | */cuda_*.cc) ;;
      *.cc) srcs+=("$path") ;;
    esac
  done < <("$bazel" query --noshow_progress \
    "kind('source file', deps(//tests/fuzz:${target}_fuzzer))" 2>/dev/null |
    grep '^//')
  # xargs runs `compile` in child shells: they get the flags through the
  # environment.
  printf '%s\n' "${srcs[@]}" | xargs -P "$jobs" -I{} bash -c \
    'read -r -a common <<<"$COMMON_FLAGS"; compile "$1"' _ {} >&2
  local objs=() lib="$out/obj/lib${target}.a" main
  main="$out/obj/tests/fuzz/${target}_fuzzer.o"
  for s in "${srcs[@]}"; do
    [[ $s == "tests/fuzz/${target}_fuzzer.cc" ]] || objs+=("$out/obj/${s%.*}.o")
  done
  rm -f "$lib"
  # An archive: the linker takes only the objects the target reaches, so
  # code for devices this build leaves out need not resolve.
  ar rcs "$lib" "${objs[@]}"
  "$cxx" -fsanitize=fuzzer,address,undefined "$main" "$lib" "${libs[@]}" \
    -ldl -pthread -o "$out/bin/${target}_fuzzer"
}

summary=()
crashed=0
for target in "${targets[@]}"; do
  echo "== $target: building" >&2
  if ! build "$target"; then
    echo "$target: BUILD FAILED" >&2
    exit 2
  fi
  dir="$out/$target"
  rm -rf "$dir"
  mkdir -p "$dir/corpus" "$dir/artifacts"
  dict=()
  [[ -f tests/fuzz/$target.dict ]] && dict=(-dict="tests/fuzz/$target.dict")
  echo "== $target: fuzzing for ${seconds}s" >&2
  status=0
  ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}" \
    "$out/bin/${target}_fuzzer" \
    -max_total_time="$seconds" -max_len=65536 -timeout=10 \
    -rss_limit_mb=2048 -print_final_stats=1 "${dict[@]}" \
    -artifact_prefix="$dir/artifacts/" "$@" \
    "$dir/corpus" "tests/fuzz/corpus/$target" >"$dir/log" 2>&1 || status=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$dir/log")
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$dir/log")
  new=$(find "$dir/corpus" -type f | wc -l)
  mapfile -t found < <(find "$dir/artifacts" -type f | sort)
  line="$target: ${seconds}s, ${execs:-?} execs, ${rate:-?} exec/s, $new new corpus entries, ${#found[@]} crashes"
  if ((status != 0 || ${#found[@]})); then
    crashed=1
    line+=" (exit $status; log $dir/log)"
    for f in "${found[@]}"; do line+=$'\n'"  $f"; done
  fi
  summary+=("$line")
  echo "$line" >&2
done
echo
printf '%s\n' "${summary[@]}"
exit "$crashed"
