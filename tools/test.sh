#!/usr/bin/env bash
# Sets up the machine (tools/setup.sh) and runs every test with Bazel, then
# the parsers' and the serving layer's tests again under AddressSanitizer and
# UndefinedBehaviorSanitizer (every parser and request path sees untrusted
# input). Ends with one line "N passed, N failed, N skipped"; exits non-zero
# on any failure. Extra arguments go to every `bazel test` (e.g. -k).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

bash tools/setup.sh || exit 1

# What untrusted bytes reach: JSON, tokenizers and chat templates, request
# parsing, the scheduler and front ends, the fuzz targets' seed replays.
sanitized=(//base/... //engine/tokenizer/... //engine/serving/... //server/...
           //tests/fuzz/...)

log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
bazel test "$@" //... 2>&1 | tee -a "$log"
status=$((status | PIPESTATUS[0]))
for config in asan ubsan; do
  echo "== the same under --config=$config: ${sanitized[*]}" | tee -a "$log"
  bazel test --config="$config" "$@" "${sanitized[@]}" 2>&1 | tee -a "$log"
  status=$((status | PIPESTATUS[0]))
done

# Bazel's summary has one line per test target: "//pkg:name  STATUS ...".
passed=$(grep -Ec '^//[^ ]+ +(\(cached\) )?PASSED' "$log")
failed=$(grep -Ec '^//[^ ]+ +(\(cached\) )?(FAILED|TIMEOUT|FLAKY|INCOMPLETE|NO STATUS|FAILED TO BUILD)' "$log")
skipped=$(grep -Ec '^//[^ ]+ +SKIPPED' "$log")
# A build failure stops Bazel before it prints any status line.
if [[ $status -ne 0 && $failed -eq 0 ]]; then failed=1; fi
echo "$passed passed, $failed failed, $skipped skipped"
exit "$status"
