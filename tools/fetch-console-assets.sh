#!/usr/bin/env bash
# Fetches the admin console's browser libraries from the npm registry into
# gateway/console/static/vendor/, pinned and verified. The fetched files are committed: installing
# the gateway needs no Node and no network. Run this only to change a version (edit the pins below),
# then commit the files and the regenerated VENDORED.md.
#
# Each package: `npm view <name>@<version> dist.integrity dist.tarball` gives the registry's own
# sha512 of the tarball; the tarball is downloaded, checked against it, and only the dist file(s)
# the console loads plus the package's LICENSE are extracted.
set -euo pipefail

# name  version  files to keep (paths inside the tarball's package/ folder)
PACKAGES=(
  "htmx.org 2.0.8 dist/htmx.min.js LICENSE"
  "chart.js 4.6.1 dist/chart.umd.min.js LICENSE.md"
)

root="$(cd "$(dirname "$0")/.." && pwd)"
dest="$root/gateway/console/static/vendor"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$dest"

manifest="$work/VENDORED.md"
{
  echo "# Vendored browser libraries"
  echo
  echo "Fetched by \`tools/fetch-console-assets.sh\` from the npm registry; the tarball's sha512 was"
  echo "checked against the registry's \`dist.integrity\`. Do not edit these files: change the pin"
  echo "in the script and run it again."
  echo
  echo "| name | version | licence | source | tarball sha512 (registry integrity) | files (sha256) |"
  echo "|---|---|---|---|---|---|"
} > "$manifest"

for entry in "${PACKAGES[@]}"; do
  read -r name version files <<<"$(echo "$entry" | awk '{n=$1; v=$2; $1=""; $2=""; print n, v, $0}')"
  integrity="$(npm view "$name@$version" dist.integrity 2>/dev/null)"
  tarball="$(npm view "$name@$version" dist.tarball 2>/dev/null)"
  licence="$(npm view "$name@$version" license 2>/dev/null)"
  [[ "$integrity" == sha512-* ]] || { echo "no sha512 integrity for $name@$version" >&2; exit 1; }
  curl -fsSL "$tarball" -o "$work/pkg.tgz"
  actual="sha512-$(openssl dgst -sha512 -binary "$work/pkg.tgz" | base64 -w0)"
  if [[ "$actual" != "$integrity" ]]; then
    echo "integrity mismatch for $name@$version: registry $integrity, downloaded $actual" >&2
    exit 1
  fi
  rm -rf "$work/package"
  # shellcheck disable=SC2086  # the file list splits on spaces on purpose
  tar -xzf "$work/pkg.tgz" -C "$work" $(for f in $files; do echo "package/$f"; done)
  mkdir -p "$dest/$name"
  kept=()
  for f in $files; do
    cp "$work/package/$f" "$dest/$name/$(basename "$f")"
    kept+=("$name/$(basename "$f") (\`$(sha256sum "$dest/$name/$(basename "$f")" | cut -d' ' -f1)\`)")
  done
  files_cell="$(printf '%s<br>' "${kept[@]}")"
  echo "| $name | $version | $licence | $tarball | \`$integrity\` | ${files_cell%<br>} |" >> "$manifest"
  echo "fetched $name@$version ($licence)"
done
cp "$manifest" "$dest/VENDORED.md"
