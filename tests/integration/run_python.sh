#!/usr/bin/env bash
# Runs a Python integration test with Debian's interpreter (the one with
# python3-grpcio): run_python.sh [NAME=VALUE ...] SCRIPT.py [ARGS...].
# NAME=VALUE pairs become environment variables (binary paths from Bazel).
set -euo pipefail
while [[ $# -gt 0 && $1 == *=* ]]; do export "$1"; shift; done
export PYTHONPATH="$PWD/clients/python:$PWD/tests/integration${PYTHONPATH:+:$PYTHONPATH}"
exec /usr/bin/python3 -u "$@"
