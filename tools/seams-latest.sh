#!/bin/sh
# `make seams-latest`: the seam tests (tests/seams) on the newest releases of the libraries the
# gateway reaches into (gateway/seams/), in a scratch venv, whatever pyproject.toml pins them to.
# How a maintainer bumps a pin: run this, read what a failure names (library, version, attribute),
# fix the seam, then move the pin (docs/testing.md, "Seams").
set -eu
PYTHON=${PYTHON:-python3}
VENV=${SEAMS_VENV:-.cache/seams-latest}
# The seamed libraries, as pyproject.toml names them, and what moves with them.
SEAMED="starlette uvicorn redis[hiredis] opentelemetry-sdk opentelemetry-exporter-otlp-proto-http opentelemetry-proto"

rm -rf "$VENV"
"$PYTHON" -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet --upgrade pip
# The project without its dependencies, then its other dependencies as pinned, then the seamed
# libraries' newest releases over the pins (pip says they conflict with the pins: that is the point).
"$VENV/bin/python" -m pip install --quiet --no-deps -e .
OTHERS=$("$VENV/bin/python" - "$SEAMED" <<'PY'
import re, sys, tomllib
seamed = {re.split(r"[\[<>=; ]", name)[0].lower() for name in sys.argv[1].split()}
with open("pyproject.toml", "rb") as f:
    project = tomllib.load(f)["project"]
dev = [d for d in project["optional-dependencies"]["dev"] if re.split(r"[\[<>=; ]", d)[0] in {"pytest", "pytest-timeout"}]
for requirement in project["dependencies"] + dev:
    if re.split(r"[\[<>=; ]", requirement)[0].lower() not in seamed:
        print(requirement)
PY
)
echo "$OTHERS" | tr '\n' '\0' | xargs -0 "$VENV/bin/python" -m pip install --quiet
# shellcheck disable=SC2086
"$VENV/bin/python" -m pip install --quiet --upgrade $SEAMED 2>&1 | grep -v "requires\|dependency resolver" || true
"$VENV/bin/python" -m pip list 2>/dev/null | grep -iE "^(starlette|uvicorn|redis|hiredis|opentelemetry-(sdk|exporter-otlp-proto-http|proto)) "
# tests/conftest.py serves the whole suite (SDKs, servers); the seam tests need none of it.
"$VENV/bin/python" -m pytest -p no:cacheprovider --noconftest -q tests/seams
