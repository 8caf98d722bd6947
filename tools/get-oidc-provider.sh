#!/usr/bin/env bash
# A real OpenID provider for the identity tests (tests/identity, tests/console/test_sso.py):
# panva's oidc-provider, exactly as tests/identity/idp/package-lock.json pins it, installed with
# `npm ci` into .cache/idp beside the tests' own provider.mjs. Idempotent (tools/npm-pinned.sh).
set -euo pipefail
exec "$(dirname "$0")/npm-pinned.sh" tests/identity/idp .cache/idp node_modules/oidc-provider
