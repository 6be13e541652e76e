#!/usr/bin/env bash
# The GPU checks, in two halves for a lent GPU machine that has the CUDA
# driver and toolkit but neither Bazel nor Debian's libraries:
#
#   tools/gpu_check.sh build   (here) builds the CUDA tests, the golden
#       tests and forward_benchmark statically against the project's own
#       libraries and packs them with the shared libraries they load into
#       .device/bundle.tar.xz (git-ignored; carry it to the device).
#   tools/gpu_check.sh run [tests|bench|hybrid]  (there, from the
#       repository root; tests and bench without an argument, one part per
#       call keeps each within the device tool's time limit; plain_tests
#       and sanitized_tests: the two halves of tests; hybrid: the
#       hybrid goldens and benchmark alone; hybrid_bench: the benchmark
#       alone; resident: the resident benchmarks alone; profile: decode
#       kernels under Nsight Compute, per kernel; profile_wide: batched
#       decode at Mixtral's widths, cuBLAS's kernels too; models: the benchmarks'
#       synthetic checkpoints alone, to start in the background beside
#       `run tests`, which the benchmark parts then wait for) runs every
#       CUDA test plain and under compute-sanitizer (memcheck; racecheck on
#       the kernel tests), the golden models on cuda:0 (resident, and
#       hybrid under a tight device budget with every --placement), and the
#       benchmarks on synthetic models (resident, and a model three times
#       the device budget run hybrid with every --placement), writing logs
#       and JSON under $OUT (or ./gpu-results); the last lines summarise.
#
# With the device tool: run `tools/gpu_check.sh build` here, then
#   run(command="tools/gpu_check.sh run", carry=[".device"])
# and copy the benchmark JSON into docs/bench/gpu/. The checkpoints can be
# written while the tests run, in one call:
#   O=$OUT; OUT=$O/models tools/gpu_check.sh run models &
#   OUT=$O/tests tools/gpu_check.sh run tests; OUT=$O/bench tools/gpu_check.sh run resident; wait
set -uo pipefail
cd "$(dirname "$0")/.."

tests=(
  //kernels/cuda:rms_norm_test
  //kernels/cuda:device_info_test
  //memory_ring:cuda_tier_test
  //engine/backend:backend_conformance_test
  //engine/parallel:nccl_communicator_test
  //engine/moe:row_transport_test
  //tests/golden:golden_logits_test
  //tests/golden:hybrid_golden_test
)
tools=(//engine/runtime:forward_benchmark)

build() {
  set -e
  # Static linking of the project's own libraries keeps the bundle to one
  # binary per target plus the system libraries; device code for the
  # Hopper GPUs the device tool lends alone keeps it within the carry limit.
  local flags=(--config=opt --dynamic_mode=off --define=cuda_archs=hopper)
  bazel build "${flags[@]}" "${tests[@]}" "${tools[@]}"
  local bin_dir binaries=()
  bin_dir=$(bazel info "${flags[@]}" bazel-bin)
  stage=$(mktemp -d)
  trap 'rm -rf "$stage"' EXIT
  mkdir -p "$stage/bundle/bin" "$stage/bundle/lib"
  for target in "${tests[@]}" "${tools[@]}"; do
    local path=${target#//}
    path=${path/://}
    cp "$bin_dir/$path" "$stage/bundle/bin/"
    binaries+=("$stage/bundle/bin/$(basename "$path")")
  done
  bash deploy/bundle_libs.sh "$stage/bundle/lib" "${binaries[@]}"
  # No GPU run reads a tokenizer, so ICU's 30 MB data library (linked
  # through the engine's tokenizer) travels as an empty stub of the same
  # soname and symbol: the bundle then fits the device tool's carry limit.
  local icu_data
  for icu_data in "$stage"/bundle/lib/libicudata.so.*; do
    [[ -e $icu_data ]] || continue
    local symbol
    symbol=$(nm -D --defined-only "$icu_data" | awk '/_dat$/ {print $3}')
    echo "const char ${symbol}[64] = {0};" |
      gcc -x c -shared -o "$icu_data.stub" -Wl,-soname,"$(basename "$icu_data")" -
    mv "$icu_data.stub" "$icu_data"
  done
  mkdir -p .device
  # xz -9's 64 MiB window: the binaries share most of their bytes.
  XZ_OPT=-9 tar -C "$stage" -cJf .device/bundle.tar.xz bundle
  du -h .device/bundle.tar.xz
}

sanitize=(compute-sanitizer --error-exitcode 9 --print-limit 20)

# NCCL probes kernels its build lacks for the device with
# cudaFuncGetAttributes (error 209, expected): API errors are not reported,
# memory accesses (NCCL's and ours) still are.
memcheck_nccl() {
  local test
  for test in nccl_communicator_test row_transport_test; do
    check "memcheck_$test" "${sanitize[@]}" --tool memcheck \
      --report-api-errors no "$bin/$test"
  done
}

# Every CUDA test plain, under memcheck and racecheck; the goldens on cuda:0.
# Uses run()'s check, bin and out.
run_tests() {
  run_plain_tests
  run_sanitized_tests
}

run_plain_tests() {
  local test
  for test in rms_norm_test device_info_test cuda_tier_test \
    backend_conformance_test nccl_communicator_test row_transport_test \
    golden_logits_test hybrid_golden_test; do
    check "$test" "$bin/$test"
  done
}

run_sanitized_tests() {
  local test
  for test in rms_norm_test cuda_tier_test backend_conformance_test \
    golden_logits_test; do
    check "memcheck_$test" "${sanitize[@]}" --tool memcheck "$bin/$test"
  done
  memcheck_nccl
  # Hybrid under memcheck: one model per weight format (bf16, fp8, mxfp4).
  check memcheck_hybrid_golden_test "${sanitize[@]}" --tool memcheck \
    "$bin/hybrid_golden_test" \
    --gtest_filter='*/mixtral_*:*/deepseek_v3_fp8_*:*/gpt_oss_*:Hybrid*'
  for test in rms_norm_test backend_conformance_test; do
    check "racecheck_$test" "${sanitize[@]}" --tool racecheck "$bin/$test"
  done
}

# The synthetic checkpoints: each architecture at make_synthetic_moe.py's
# defaults, and mixtral_wide, two layers of Mixtral 8x7B's own widths
# (hidden 4096, experts of 14336, 32 heads of which 8 KV; four experts,
# about 3.5 GB), whose products are large enough to be measured against
# the device's memory bandwidth rather than against launch gaps.
ALL_ARCHS="mixtral mixtral_wide deepseek_v3 gpt_oss"
synthetic_args() {
  case $1 in
    mixtral_wide)
      echo --arch mixtral --hidden 4096 --intermediate 14336 --layers 2 \
        --experts 4 --heads 32 --kv_heads 8
      ;;
    *) echo --arch "$1" ;;
  esac
}

# Benchmarks on synthetic checkpoints of real shapes, written here: every
# weight resident, then hybrid under a third of the model's size.
run_benchmarks() {
  run_resident_benchmarks
  run_hybrid_benchmark
}

models=/tmp/gpu-check-models

# The synthetic checkpoint of architecture $1 in $models, written once: a
# second caller (`run models` started in the background beside `run
# tests`, then the benchmarks) waits for the first to finish it.
synthetic_model() {
  local arch=$1
  mkdir -p "$models"
  (
    flock 9
    [[ -d $models/$arch ]] && exit 0
    rm -rf "$models/$arch.partial"
    # shellcheck disable=SC2046  # the arguments split as words
    python3 tools/make_synthetic_moe.py $(synthetic_args "$arch") \
      --out "$models/$arch.partial" >"$out/make_$arch.log" 2>&1 &&
      mv "$models/$arch.partial" "$models/$arch"
  ) 9>"$models/$arch.lock"
}

# Every weight resident: decode steps as CUDA graphs and, for comparison in
# the same process, issued from the host with the MoE layers routed on the
# device and on the host. GPU_CHECK_ARCHS picks architectures.
run_resident_benchmarks() {
  local arch
  for arch in ${GPU_CHECK_ARCHS:-$ALL_ARCHS}; do
    synthetic_model "$arch"
    check "bench_$arch" bash -c "\"$bin/forward_benchmark\" \
      --model $models/$arch --device cuda:0 --batches 1,8,32 \
      --steps_as graphs,device,host >$out/bench_$arch.json"
  done
}

# The synthetic Mixtral (about 2.2 GB, 0.6 GB of it what every token needs)
# under a device budget of a third of it, with every placement.
run_hybrid_benchmark() {
  synthetic_model mixtral
  check "bench_hybrid_mixtral" bash -c "\"$bin/forward_benchmark\" \
    --model $models/mixtral --device cuda:0 --batches 1,8 --prompt 256 \
    --steps 10 --device_memory_budget 730MB --placements auto,cpu,stream \
    >$out/bench_hybrid_mixtral.json"
  # Three tiers: pinned host RAM for about half of the experts outside
  # device memory, the rest streamed from disk.
  check "bench_three_tier_mixtral" bash -c "\"$bin/forward_benchmark\" \
    --model $models/mixtral --device cuda:0 --batches 1,8 --prompt 256 \
    --steps 10 --device_memory_budget 730MB --host_memory_budget 900MB \
    --placements auto,stream >$out/bench_three_tier_mixtral.json"
}

# forward_benchmark on the synthetic checkpoint $2 with arguments $4...
# under Nsight Compute (the device image's ncu; its own clock control
# off), the kernels whose names match $3, as check $1; then every kernel
# summarised by tools/kernel_profile.py beside the device's copy ceiling,
# and each step's launches and time (a step starts at its embedding), in
# $out/$1.txt. Fails (returns 1) without ncu.
profile_under_ncu() {
  local name=$1 model=$2 kernels=$3 ncu
  shift 3
  synthetic_model "$model"
  ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null |
    head -1)
  if [[ -z $ncu ]]; then
    summary+=("FAIL $name (no ncu on this machine)")
    status=1
    return 1
  fi
  check "$name" bash -c "\"$ncu\" --clock-control none --csv \
    --page raw --print-units base --kernel-name-base mangled \
    --kernel-name regex:'$kernels' \
    --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum \
    --log-file $out/$name.csv \
    \"$bin/forward_benchmark\" --model $models/$model --device cuda:0 $* \
    >$out/$name.json"
  python3 tools/kernel_profile.py "$out/$name.csv" \
    --benchmark_json "$out/$name.json" --step_kernel EmbedKernel \
    >"$out/$name.txt" 2>&1
}

# Where a decode step's GPU time goes: the synthetic Mixtral resident,
# prefill of 16 tokens and three decode steps of one and of eight tokens
# issued from the host (no graphs: one launch per kernel), every kernel of
# the engine (kernel_profile.py's `--step N` breaks one step down).
run_profile() {
  # The engine's kernels are the ones in namespace ringmoe (the ceiling
  # probes' copies and cuBLAS's are not).
  profile_under_ncu profile_mixtral mixtral ringmoe --batches 1,8 \
    --prompt 16 --context 16 --steps 3 --steps_as device || return
  cat "$out/profile_mixtral.txt"
}

# Batched decode at Mixtral's own widths, where the products of 9 to 64
# rows decide the step: mixtral_wide, steps of 8 and 32 tokens issued from
# the host, every engine kernel and cuBLAS's under Nsight Compute; the
# table of the whole profile, then of its last step (32 tokens).
run_profile_wide() {
  profile_under_ncu profile_wide mixtral_wide 'ringmoe|gemm|Gemm' \
    --batches 8,32 --prompt 16 --context 16 --steps 2 --steps_as device ||
    return
  local last
  last=$(awk '$1 ~ /^[0-9]+$/ {n = $1} END {print n}' "$out/profile_wide.txt")
  python3 tools/kernel_profile.py "$out/profile_wide.csv" \
    --benchmark_json "$out/profile_wide.json" --step_kernel EmbedKernel \
    --step "$last" >"$out/profile_wide_last_step.txt" 2>&1
  cat "$out/profile_wide.txt" "$out/profile_wide_last_step.txt"
}

run() {
  local part=${1:-all}
  local out=${OUT:-gpu-results}
  mkdir -p "$out"
  if [[ $part == models ]]; then
    # No bundle: another part may be unpacking and running it.
    local arch
    for arch in ${GPU_CHECK_ARCHS:-$ALL_ARCHS}; do
      synthetic_model "$arch" || return 1
    done
    return 0
  fi
  rm -rf /tmp/bundle
  tar -xJf .device/bundle.tar.xz -C /tmp || return 1
  local bin=/tmp/bundle/bin
  # NCCL (200 MB) does not travel: the device image has it in its CUDA
  # toolkit or in the Python environment's nvidia-nccl package.
  local nccl_dir
  nccl_dir=$(dirname "$(find /usr/local/cuda/lib64/ /usr/lib/x86_64-linux-gnu/ \
    /opt /usr/local/lib -name 'libnccl.so.2' 2>/dev/null | head -1)")
  export LD_LIBRARY_PATH="/tmp/bundle/lib:/usr/local/cuda/lib64:$nccl_dir:${LD_LIBRARY_PATH:-}"
  export RINGMOE_TEST_DEVICE=cuda:0
  export PATH="/usr/local/cuda/bin:$PATH"
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.mem \
    --format=csv >"$out/nvidia-smi.csv" 2>&1
  local summary=() status=0
  # What ran so far, and the logs as one archive (the device tool brings
  # back few files): also when a time limit stops the run part-way.
  report() {
    local f
    for f in "$out"/*_test.log; do
      [[ -e $f ]] || continue
      grep -hE "^\[  (PASSED|FAILED|SKIPPED) |ERROR SUMMARY" "$f" |
        sed "s|^|$(basename "$f"): |"
    done
    (cd "$out" && tar -czf logs.tar.gz -- *.log && rm -f -- *.log)
    printf '%s\n' "${summary[@]}"
  }
  trap 'summary+=("STOPPED by a time limit"); report; exit 124' TERM
  check() {  # name, command...
    local name=$1
    shift
    local tmp
    tmp=$(mktemp -d)
    if TEST_TMPDIR=$tmp "$@" >"$out/$name.log" 2>&1; then
      summary+=("PASS $name")
    else
      summary+=("FAIL $name (see $name.log)")
      status=1
    fi
    rm -rf "$tmp"
  }
  case $part in
    tests) run_tests ;;
    plain_tests) run_plain_tests ;;
    sanitized_tests) run_sanitized_tests ;;
    bench) run_benchmarks ;;
    hybrid)
      check hybrid_golden_test "$bin/hybrid_golden_test"
      run_hybrid_benchmark
      ;;
    hybrid_bench) run_hybrid_benchmark ;;
    resident) run_resident_benchmarks ;;
    profile) run_profile ;;
    profile_wide) run_profile_wide ;;
    nccl)
      check nccl_communicator_test "$bin/nccl_communicator_test"
      check row_transport_test "$bin/row_transport_test"
      memcheck_nccl
      ;;
    *)
      run_tests
      run_benchmarks
      ;;
  esac
  report
  return $status
}

case ${1:-} in
  build) build ;;
  run) run "${2:-all}" ;;
  *)
    echo "usage: $0 build|run [tests|plain_tests|sanitized_tests|bench|" \
      "hybrid|hybrid_bench|resident|profile|profile_wide|nccl|models]" >&2
    exit 2
    ;;
esac
