#!/bin/sh
# Runs the Python half with Debian's interpreter (python3-numpy).
exec /usr/bin/python3 tests/golden/random_shapes_expert_parallel_test.py "$@"
