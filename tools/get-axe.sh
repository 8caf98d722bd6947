#!/usr/bin/env bash
# axe-core, the accessibility engine the browser tests (tests/console) run inside Chromium, exactly
# as tests/console/axe/package-lock.json pins it (version and sha512), installed with `npm ci` into
# .cache/axe. Deque's own npm package: no wrapper whose bundled copy lags behind, no Python
# dependency. Idempotent: skipped when the installed lockfile's hash matches.
set -euo pipefail
cd "$(dirname "$0")/.."

src=tests/console/axe
dest=.cache/axe
stamp="$dest/.lock-sha256"

if ! command -v npm >/dev/null; then
  echo "get-axe.sh: npm is needed (Debian: apt-get install -y nodejs npm)" >&2
  exit 1
fi

want=$(cat "$src/package.json" "$src/package-lock.json" | sha256sum | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -f "$dest/node_modules/axe-core/axe.min.js" ]; then
  exit 0
fi

mkdir -p "$dest"
cp "$src/package.json" "$src/package-lock.json" "$dest/"
rm -f "$stamp"
# axe-core has no install scripts; --ignore-scripts keeps it that way for any later version.
(cd "$dest" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error)
echo "$want" > "$stamp"
echo "get-axe.sh: axe-core installed into $dest"
