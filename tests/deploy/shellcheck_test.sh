#!/usr/bin/env bash
# The deploy scripts are shellcheck-clean: the entrypoint and health check
# run unattended as PID 1 and as Docker's HEALTHCHECK, where a quoting slip
# shows up only in production; so is the container test that runs them.
set -euo pipefail
if ! command -v shellcheck >/dev/null 2>&1; then
  echo "shellcheck_test: shellcheck missing (run tools/setup.sh)" >&2
  exit 1
fi
shellcheck deploy/*.sh tests/deploy/*.sh tools/test_container.sh
