#!/usr/bin/env bash
# Installs the npm packages a test folder pins (SRC/package.json and package-lock.json, versions and
# sha512s) into DEST with `npm ci --ignore-scripts`. Idempotent: skipped when DEST's stamp holds the
# hash of both files and CHECK (a path under DEST) exists. Used by tools/get-axe.sh and
# tools/get-oidc-provider.sh.
#   tools/npm-pinned.sh SRC DEST CHECK
set -euo pipefail
cd "$(dirname "$0")/.."

src=$1 dest=$2 check=$3
stamp="$dest/.lock-sha256"
name=$(basename "$src")

if ! command -v npm >/dev/null; then
  echo "npm-pinned.sh: npm is needed for $src (Debian: apt-get install -y nodejs npm)" >&2
  exit 1
fi

want=$(cat "$src/package.json" "$src/package-lock.json" | sha256sum | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -e "$dest/$check" ]; then
  exit 0
fi

mkdir -p "$dest"
cp "$src/package.json" "$src/package-lock.json" "$dest/"
rm -f "$stamp"
# No install scripts: none of these packages needs one, and any later version gets none either.
(cd "$dest" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error)
echo "$want" > "$stamp"
echo "npm-pinned.sh: $name installed into $dest"
