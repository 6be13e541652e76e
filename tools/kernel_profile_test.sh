#!/usr/bin/env bash
# Runs kernel_profile_test.py with Debian's interpreter.
exec /usr/bin/python3 -u "$@"
