#!/usr/bin/env bash
# axe-core, the accessibility engine the browser tests (tests/console) run inside Chromium, exactly
# as tests/console/axe/package-lock.json pins it (version and sha512), installed with `npm ci` into
# .cache/axe. Deque's own npm package: no wrapper whose bundled copy lags behind, no Python
# dependency. Idempotent (tools/npm-pinned.sh).
set -euo pipefail
exec "$(dirname "$0")/npm-pinned.sh" tests/console/axe .cache/axe node_modules/axe-core/axe.min.js
