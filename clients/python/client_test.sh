#!/usr/bin/env bash
# Runs client_test.py with Debian's Python (the one with python3-grpcio).
set -euo pipefail
export PYTHONPATH="$PWD/clients/python"
exec /usr/bin/python3 -u clients/python/client_test.py
