#!/usr/bin/env bash
# Bump the pinned coding agents to the newest published versions (or to the versions given, e.g.
# `tools/agents/bump.sh @openai/codex@0.170.0`), rewrite the lockfile, reinstall and re-capture the
# golden request bodies of the new versions (tests/agents/golden). Then run the agent tests with
# `--agents-results=tests/agents/results.json` and `tools/agents/matrix.py` to refresh the matrix.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-.venv/bin/python}

specs=("$@")
if [ ${#specs[@]} -eq 0 ]; then
  for pkg in @anthropic-ai/claude-code @openai/codex opencode-ai @google/gemini-cli; do
    specs+=("$pkg@$(npm view "$pkg" version)")
  done
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp tests/agents/package.json "$work/"
(cd "$work" && npm install --save-exact --package-lock-only --no-audit --no-fund "${specs[@]}")
cp "$work/package.json" "$work/package-lock.json" tests/agents/
"$PY" tools/agents/complete_lock.py
tools/agents/install.sh
"$PY" tools/agents/capture.py
