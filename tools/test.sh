#!/usr/bin/env bash
# Sets up the machine (tools/setup.sh) and runs every test with Bazel, then
# every C++ test again under AddressSanitizer and UndefinedBehaviorSanitizer
# together (--config=asan_ubsan), the threaded ones (memory ring, scheduler, step broadcast) under
# ThreadSanitizer, and last the
# container image built and run with podman
# (tools/test_container.sh; RINGMOE_SKIP_CONTAINER_TEST=1 skips it). Ends
# with one line "N passed, N failed, N skipped"; exits non-zero on any
# failure. Extra arguments go to every `bazel test` (e.g. -k).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

bash tools/setup.sh || exit 1

# Under ASan and UBSan (one build with both): every C++ test (parsers, engine, kernels, ring,
# front ends, the fuzz targets' seed replays); not the integration tests
# (Python clients driving a server process), the emulated-CPU runs of
# tests/isa or the deployment checks, which would only rerun the same code
# slower.
sanitized=(//... -//tests/integration/... -//tests/isa/... -//tests/deploy/...)
# Under TSan: the threads that share state, the memory ring's, the
# scheduler's and the expert-parallel step broadcast's heartbeat (on
# std::mutex: Debian's Abseil is not built for TSan, which could not see
# absl::Mutex's ordering).
threaded=(//memory_ring/... //engine/serving:scheduler_test
          //engine/serving:scheduler_plan_test
          //engine/serving:step_broadcast_test
          //engine/parallel:metered_communicator_test)

log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
bazel test "$@" //... 2>&1 | tee -a "$log"
status=$((status | PIPESTATUS[0]))
for config in asan_ubsan tsan; do
  targets=("${sanitized[@]}")
  [[ $config == tsan ]] && targets=("${threaded[@]}")
  echo "== under --config=$config: ${targets[*]}" | tee -a "$log"
  bazel test --config="$config" "$@" -- "${targets[@]}" 2>&1 | tee -a "$log"
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
