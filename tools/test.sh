#!/usr/bin/env bash
# Sets up the machine (tools/setup.sh) and runs every test with Bazel.
# Ends with one line "N passed, N failed, N skipped"; exits non-zero on any
# failure. Extra arguments go to `bazel test` (e.g. --config=asan).
set -uo pipefail
cd "$(dirname "$0")/.."

bash tools/setup.sh || exit 1

log=$(mktemp)
trap 'rm -f "$log"' EXIT
bazel test "$@" //... 2>&1 | tee "$log"
status=${PIPESTATUS[0]}

# Bazel's summary has one line per test target: "//pkg:name  STATUS ...".
passed=$(grep -Ec '^//[^ ]+ +(\(cached\) )?PASSED' "$log")
failed=$(grep -Ec '^//[^ ]+ +(\(cached\) )?(FAILED|TIMEOUT|FLAKY|INCOMPLETE|NO STATUS|FAILED TO BUILD)' "$log")
skipped=$(grep -Ec '^//[^ ]+ +SKIPPED' "$log")
# A build failure stops Bazel before it prints any status line.
if [[ $status -ne 0 && $failed -eq 0 ]]; then failed=1; fi
echo "$passed passed, $failed failed, $skipped skipped"
exit "$status"
