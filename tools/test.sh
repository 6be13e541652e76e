#!/usr/bin/env bash
# Sets up the machine (tools/setup.sh) and runs every test with Bazel, then
# the parsers' and the serving layer's tests again under AddressSanitizer and
# UndefinedBehaviorSanitizer (every parser and request path sees untrusted
# input), and last the container image built and run with podman
# (tools/test_container.sh; RINGMOE_SKIP_CONTAINER_TEST=1 skips it). Ends
# with one line "N passed, N failed, N skipped"; exits non-zero on any
# failure. Extra arguments go to every `bazel test` (e.g. -k).
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

# The container image built from deploy/Dockerfile and run with podman: not
# a Bazel test, since it builds with the whole source tree and runs podman
# as root outside any sandbox. One test in the summary.
if [[ ${RINGMOE_SKIP_CONTAINER_TEST:-0} == 1 ]]; then
  echo "== container test skipped (RINGMOE_SKIP_CONTAINER_TEST=1)"
  skipped=$((skipped + 1))
else
  echo "== container test: tools/test_container.sh"
  if bash tools/test_container.sh; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    status=1
  fi
fi
echo "$passed passed, $failed failed, $skipped skipped"
exit "$status"
