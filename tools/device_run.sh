#!/usr/bin/env bash
# Runs on the GPU machine, from the unpacked bundle of
# tools/device_bundle.sh (tar -xJf .device/bundle.tar.xz -C /tmp). Writes
# each test's JSON report and the device listing under $OUT (or
# ./device-results), and ends with a one-line summary per test.
set -uo pipefail
bundle=${BUNDLE:-$(dirname "$0")}
out=${OUT:-device-results}
mkdir -p "$out"
export LD_LIBRARY_PATH="$bundle/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv >"$out/nvidia-smi.csv" 2>&1
"$bundle/bin/ringmoe" devices | tee "$out/devices.txt"
status=0
for test in ops_test rms_norm_test device_info_test cuda_tier_test; do
  if "$bundle/bin/$test" --gtest_output="json:$out/$test.json" >"$out/$test.log" 2>&1; then
    echo "$test: PASSED"
  else
    echo "$test: FAILED (see $out/$test.log)"
    status=1
  fi
  grep -E "SKIPPED|FAILED|PASSED" "$out/$test.log" | tail -3
done
exit $status
