#!/usr/bin/env bash
# The compose stack's Prometheus configuration and alert rules pass Debian's
# promtool (from the prometheus package that tools/setup.sh installs), the
# same checks Prometheus runs when it loads them.
set -euo pipefail
promtool=${PROMTOOL:-/usr/bin/promtool}
if [[ ! -x $promtool ]]; then
  echo "promtool_test: $promtool missing (run tools/setup.sh)" >&2
  exit 1
fi
# rule_files in prometheus.yml is relative to the config's directory, so
# this also checks that the rules file sits where the config expects it.
"$promtool" check config deploy/prometheus/prometheus.yml
"$promtool" check rules deploy/prometheus/rules.yml
