#!/usr/bin/env bash
# `make image`: the gateway and Reframr images, built without a Docker daemon (podman/buildah,
# chroot isolation, so no OCI runtime is needed to build), saved as OCI archives:
#
#   dist/sluicegate-gateway.oci.tar    localhost/sluicegate-gateway:<appVersion>
#   dist/sluicegate-reframr.oci.tar    localhost/sluicegate-reframr:<appVersion>
#   dist/sluicegate-<name>.cdx.json    its CycloneDX SBOM (the Containerfile's `sbom` stage)
#   dist/sluicegate-<name>.inputs      the hash of what went into it
#
# An archive is rebuilt only when that hash changes: its Containerfile and ignore file, the files of
# the build context those let in, the base's recipe, the version and this script.
#
# The Containerfiles are the ones `docker build` uses elsewhere; only their BASE differs. No registry
# is reachable here, so the base is made from Debian's packages with mmdebstrap (trixie: Python
# 3.13, as the official python:3.13-slim-trixie image the Containerfiles default to).
#
#   tools/image/build.sh [gateway|reframr ...]    build what is out of date (default: both)
#   tools/image/build.sh --check [...]            exit 1, naming them, if any is out of date
set -euo pipefail

SELF="$(cd "$(dirname "$0")" && pwd)/$(basename "$0")"
ROOT="$(cd "$(dirname "$SELF")/../.." && pwd)"
cd "$ROOT"
DOCKER=deploy/docker
DIST=dist
VERSION="$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\} *$/\1/p' helm/sluicegate/Chart.yaml)"
SUITE="${SLUICEGATE_BASE_SUITE:-trixie}"
BASE_PACKAGES="python3,python3-venv,ca-certificates"
# Builds run their RUN steps in a chroot: no crun/runc, cgroups or rlimits involved.
export BUILDAH_ISOLATION=chroot

check=0
if [ "${1:-}" = "--check" ]; then
    check=1
    shift
fi
names="${*:-gateway reframr}"

sha() { sha256sum | cut -c1-16; }

# mmdebstrap streams a minimal Debian with Python into `podman import`: no registry needed.
make_base() {
    # shellcheck disable=SC2016 # the hook's $1 (the chroot) is mmdebstrap's to expand
    mmdebstrap --quiet --variant=minbase --include="$BASE_PACKAGES" \
        --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
        --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/locale/*' \
        --aptopt='Acquire::Languages "none"' \
        --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin' \
        "$SUITE" - | podman import --quiet --change 'ENV LANG=C.UTF-8' - "$1" > /dev/null
}

base_recipe() {
    echo "$SUITE $BASE_PACKAGES"
    declare -f make_base
}

# The files `podman build` sends for $1: the paths its ignore file lets in ("!path"), less the
# directories it leaves out again, hashed with their names.
context_files() {
    ignore="$DOCKER/$1.Dockerfile.dockerignore"
    roots="$(sed -n 's#^!\(.*\)$#\1#p' "$ignore" | sed 's#/$##')"
    pruned="$(grep -v -e '^#' -e '^!' -e '^\*$' -e '^$' -e '__pycache__' "$ignore" | sed 's#/$##' || true)"
    # shellcheck disable=SC2086 # the roots are separate words
    find $roots -type f ! -path '*/__pycache__/*' ! -name '*.pyc' | LC_ALL=C sort | while read -r file; do
        keep=1
        for dir in $pruned; do
            case "$file" in "$dir"/*) keep=0 ;; esac
        done
        [ "$keep" = 0 ] || sha256sum "$file"
    done
}

inputs_hash() {
    {
        echo "$1 $VERSION"
        base_recipe
        sha256sum < "$SELF"
        sha256sum "$DOCKER/$1.Dockerfile" "$DOCKER/$1.Dockerfile.dockerignore"
        context_files "$1"
    } | sha
}

current() {  # $1: name; true when its archive and SBOM were built from today's inputs
    [ -f "$DIST/sluicegate-$1.oci.tar" ] && [ -f "$DIST/sluicegate-$1.cdx.json" ] \
        && [ "$(cat "$DIST/sluicegate-$1.inputs" 2>/dev/null)" = "$(inputs_hash "$1")" ]
}

if [ "$check" = 1 ]; then
    stale=""
    for name in $names; do
        current "$name" || stale="$stale $DIST/sluicegate-$name.oci.tar"
    done
    [ -z "$stale" ] && exit 0
    echo "out of date or missing (run \`make image\`):$stale" >&2
    exit 1
fi

todo=""
for name in $names; do
    current "$name" || todo="$todo $name"
done
if [ -z "$todo" ]; then
    echo "images up to date:$(for n in $names; do printf ' %s' "$DIST/sluicegate-$n.oci.tar"; done)"
    exit 0
fi
command -v podman > /dev/null || { echo "make image needs podman (apt-get install podman buildah runc mmdebstrap)" >&2; exit 1; }

# The base, once per recipe (its tag carries the recipe's hash); older ones of ours go.
BASE="localhost/sluicegate-base:$SUITE-$(base_recipe | sha)"
if ! podman image exists "$BASE"; then
    command -v mmdebstrap > /dev/null || { echo "make image needs mmdebstrap (apt-get install mmdebstrap)" >&2; exit 1; }
    echo "base $BASE: mmdebstrap $SUITE"
    make_base "$BASE"
    for old in $(podman images --format '{{.Repository}}:{{.Tag}}' localhost/sluicegate-base); do
        [ "$old" = "$BASE" ] || podman rmi "$old" > /dev/null 2>&1 || true
    done
fi

# pip inside the build must trust what the host trusts (a TLS-intercepting proxy, say): the host's
# bundle is mounted for the build only and never lands in a layer.
CA=/etc/ssl/certs/ca-certificates.crt
set --
[ -f "$CA" ] && set -- -v "$CA:$CA:ro"

mkdir -p "$DIST"
for name in $todo; do
    image="localhost/sluicegate-$name:$VERSION"
    hash="$(inputs_hash "$name")"
    echo "image $image (inputs $hash)"
    rm -f "$DIST/sluicegate-$name.inputs"
    previous="$(podman image inspect --format '{{.Id}}' "$image" 2> /dev/null || true)"
    podman build --quiet -f "$DOCKER/$name.Dockerfile" --build-arg BASE="$BASE" \
        --build-arg VERSION="$VERSION" "$@" -t "$image" . > /dev/null
    # The sbom stage, from the layers just cached: its file goes beside the archive, its tag goes.
    podman build --quiet -f "$DOCKER/$name.Dockerfile" --build-arg BASE="$BASE" \
        --build-arg VERSION="$VERSION" "$@" --target sbom -t "$image-sbom" . > /dev/null
    container="$(podman create "$image-sbom" true)"
    podman cp "$container:/sbom.cdx.json" "$DIST/sluicegate-$name.cdx.json"
    podman rm "$container" > /dev/null
    podman rmi "$image-sbom" > /dev/null
    # The image this one replaces, unless something else still uses it (its layers stay cached).
    if [ -n "$previous" ] && [ "$previous" != "$(podman image inspect --format '{{.Id}}' "$image")" ]; then
        podman rmi "$previous" > /dev/null 2>&1 || true
    fi
    podman save --quiet --format oci-archive -o "$DIST/sluicegate-$name.oci.tar.part" "$image"
    mv "$DIST/sluicegate-$name.oci.tar.part" "$DIST/sluicegate-$name.oci.tar"
    echo "$hash" > "$DIST/sluicegate-$name.inputs"
done
for name in $names; do
    ls -l "$DIST/sluicegate-$name.oci.tar" "$DIST/sluicegate-$name.cdx.json"
done
