#!/bin/sh
# Runs the Python half with Debian's interpreter, as tests/golden does.
exec /usr/bin/python3 clients/cli/chat_template_command_test.py clients/cli/ringmoe
