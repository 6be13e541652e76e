#!/usr/bin/env bash
# The README's first command: sets up the machine, builds everything and
# lists the CUDA devices ringmoe can use.
set -euo pipefail
cd "$(dirname "$0")/.."

bash tools/setup.sh
bazel build --config=opt //...
bazel run --config=opt //clients/cli:ringmoe -- devices
