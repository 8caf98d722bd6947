#!/usr/bin/env bash
# Install the coding agents tests/agents runs, exactly as tests/agents/package-lock.json pins them,
# into .cache/agents with `npm ci`. Idempotent: skipped when the installed lockfile's hash matches.
set -euo pipefail
cd "$(dirname "$0")/../.."

src=tests/agents
dest=.cache/agents
stamp="$dest/.lock-sha256"

if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "install.sh: node and npm are needed (Node >= 20; .ci/run installs Debian's)" >&2
  exit 1
fi
major=$(node -p 'process.versions.node.split(".")[0]')
if [ "$major" -lt 20 ]; then
  echo "install.sh: Node >= 20 is needed, found $(node --version)" >&2
  exit 1
fi

want=$(cat "$src/package.json" "$src/package-lock.json" | sha256sum | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -x "$dest/node_modules/.bin/claude" ]; then
  exit 0
fi

mkdir -p "$dest"
cp "$src/package.json" "$src/package-lock.json" "$dest/"
rm -f "$stamp"
# --ignore-scripts would skip the packages' postinstall steps that place their native binaries
# (Claude Code, opencode): the scripts run, with no audit or funding requests.
(cd "$dest" && npm ci --no-audit --no-fund --loglevel=error)
echo "$want" > "$stamp"
echo "install.sh: agents installed into $dest"
