"""Every captured agent body (tests/agents/golden: one file per agent version and turn) parses,
on a translated pool and on a native pool with `native_normalise`, without npm or a worker: a new
agent version's body that the gateway cannot take fails here first, naming the file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson
import pytest

from gateway.apis.anthropic.dialect import MESSAGES
from gateway.apis.gemini.dialect import GeminiDialect
from gateway.apis.gemini.routes import model_in_path
from gateway.apis.openai.dialect import CHAT
from gateway.apis.responses.dialect import RESPONSES
from gateway.model_table import NATIVE, ModelConfig, Protocols
from gateway.proxy.translation import model_rules, native

GOLDEN = Path(__file__).parent.parent / "agents" / "golden"
FILES = sorted(GOLDEN.glob("*.json"))
_DIALECTS: dict[str, Any] = {
    "/v1/messages": MESSAGES,
    "/v1/responses": RESPONSES,
    "/v1/chat/completions": CHAT,
}


def _capture(path: Path) -> tuple[Any, dict[str, Any]]:
    captured = json.loads(path.read_text())
    route = captured["path"].split("?")[0]
    model = model_in_path(route)
    if model is not None:
        # Gemini names the model in the path; its API is always translated (no worker speaks it).
        return GeminiDialect.of(model, streaming=True, sse=True), {**captured["body"], "model": model}
    return _DIALECTS[route], captured["body"]


@pytest.mark.skipif(not FILES, reason="no golden agent bodies captured yet")
@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_a_captured_agent_body_parses_translated_and_native(path: Path) -> None:
    dialect, body = _capture(path)
    model = body["model"]
    raw = orjson.dumps(body)
    translated = dialect.parse(raw, ())
    assert not isinstance(translated, native.NativeCall)
    assert model_rules.apply(translated, ModelConfig(name=model)) is translated
    assert translated.estimated_prompt_tokens() > 0
    if dialect is CHAT or isinstance(dialect, GeminiDialect):
        return  # chat is every worker's own API, Gemini's none: never native
    api = dialect.name
    config = ModelConfig(name=model, protocols=Protocols(**{api: NATIVE}), native_normalise=True)
    forwarded = model_rules.apply(dialect.parse(raw, {model}), config)
    assert isinstance(forwarded, native.NativeCall)
    if api == "messages":
        assert all(m.get("role") != "system" for m in forwarded.body["messages"])
    else:
        assert all(t.get("type") == "function" for t in forwarded.body.get("tools") or [])
