#!/bin/sh
# The browser tests (tests/console) drive Debian's own Chromium through Playwright for Python;
# `playwright install` (a browser download from outside the OS) is never used. Installs it with
# apt when run as root and it is missing; otherwise prints the command and fails.
set -eu

CHROMIUM="${SLUICEGATE_CHROMIUM:-/usr/bin/chromium}"
if [ -x "$CHROMIUM" ]; then
    exit 0
fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium
    exit 0
fi
echo "tests/console needs Chromium at $CHROMIUM; install it with:" >&2
echo "    sudo apt-get install -y chromium" >&2
echo "(or point SLUICEGATE_CHROMIUM at another Chromium binary)" >&2
exit 1
