#!/bin/sh
# Runs the Python half with Debian's interpreter (python3-numpy; see the
# README's note on /usr/bin/python3).
RINGMOE_CLI=clients/cli/ringmoe exec /usr/bin/python3 tests/golden/random_shapes_test.py
