#!/usr/bin/env bash
# Builds the GPU tests and tools here (Bazel, Debian's libraries) and packs
# them, with the non-CUDA shared libraries they load and tools/device_run.sh,
# into .device/bundle.tar.xz (git-ignored) to carry to a GPU machine that has
# the CUDA driver and libraries but neither Bazel nor Debian's gRPC/Abseil.
# Compressed, because the device tool carries at most 64 MiB with the
# working tree (ICU's data library alone is 30 MB). There:
#   tar -xJf .device/bundle.tar.xz -C /tmp && /tmp/bundle/device_run.sh
set -euo pipefail
cd "$(dirname "$0")/.."

targets=(
  //kernels/cuda:ops_test
  //kernels/cuda:rms_norm_test
  //kernels/cuda:device_info_test
  //memory_ring:cuda_tier_test
  //clients/cli:ringmoe
)
# Static linking of the project's own libraries keeps the bundle to one
# binary per target plus the system libraries.
bazel build --config=opt --dynamic_mode=off "${targets[@]}"
bin_dir=$(bazel info --config=opt bazel-bin)

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
out=$stage/bundle
mkdir -p "$out/bin" "$out/lib"
binaries=()
for target in "${targets[@]}"; do
  path=${target#//}
  path=${path/://}
  cp "$bin_dir/$path" "$out/bin/"
  binaries+=("$out/bin/$(basename "$path")")
done
bash deploy/bundle_libs.sh "$out/lib" "${binaries[@]}"
cp tools/device_run.sh "$out/"
mkdir -p .device
tar -C "$stage" -cJf .device/bundle.tar.xz bundle
du -h .device/bundle.tar.xz
