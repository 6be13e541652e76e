#!/bin/sh
# Runs the Python half with Debian's interpreter (see the README's note on
# /usr/bin/python3).
exec /usr/bin/python3 tests/golden/cli_generate_test.py clients/cli/ringmoe
