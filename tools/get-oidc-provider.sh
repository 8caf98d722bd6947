#!/usr/bin/env bash
# A real OpenID provider for the identity tests (tests/identity): panva's oidc-provider, exactly as
# tests/identity/idp/package-lock.json pins it, installed with `npm ci` into .cache/idp beside the
# test's own provider.mjs. Idempotent: skipped when the installed lockfile's hash matches.
set -euo pipefail
cd "$(dirname "$0")/.."

src=tests/identity/idp
dest=.cache/idp
stamp="$dest/.lock-sha256"

if ! command -v npm >/dev/null; then
  echo "get-oidc-provider.sh: npm is needed (Debian: apt-get install -y nodejs npm)" >&2
  exit 1
fi

want=$(cat "$src/package.json" "$src/package-lock.json" | sha256sum | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -d "$dest/node_modules/oidc-provider" ]; then
  exit 0
fi

mkdir -p "$dest"
cp "$src/package.json" "$src/package-lock.json" "$dest/"
rm -f "$stamp"
# Neither package has install scripts; --ignore-scripts keeps it that way for any later version.
(cd "$dest" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error)
echo "$want" > "$stamp"
echo "get-oidc-provider.sh: oidc-provider installed into $dest"
