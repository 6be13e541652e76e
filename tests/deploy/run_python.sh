#!/usr/bin/env bash
# Runs a Python test with Debian's interpreter (the one with python3-yaml and
# python3-grpcio; the first python3 on PATH may lack them):
# run_python.sh [NAME=VALUE ...] SCRIPT.py [ARGS...]. NAME=VALUE pairs become
# environment variables (binary paths from Bazel's $(rootpath ...)).
set -euo pipefail
while [[ $# -gt 0 && $1 == *=* ]]; do export "${1?}"; shift; done
exec /usr/bin/python3 -u "$@"
