"""Every captured agent body (tests/agents/golden: one file per agent version and turn) parses,
on a translated pool and on a native pool with `native_normalise`, without npm or a worker: a new
agent version's body that the gateway cannot take fails here first, naming the file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson
import pytest

from gateway.config import ModelConfig
from gateway.model_table import NATIVE, Protocols
from gateway.proxy.dialects import model_rules, native
from gateway.proxy.dialects.anthropic import MESSAGES
from gateway.proxy.dialects.openai import CHAT
from gateway.proxy.dialects.responses import RESPONSES

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
    if dialect is CHAT:
        return  # chat is every worker's own API: never native, nothing dropped
    api = dialect.name
    config = ModelConfig(name=model, protocols=Protocols(**{api: NATIVE}), native_normalise=True)
    forwarded = model_rules.apply(dialect.parse(raw, {model}), config)
    assert isinstance(forwarded, native.NativeCall)
    if api == "messages":
        assert all(m.get("role") != "system" for m in forwarded.body["messages"])
    else:
        assert all(t.get("type") == "function" for t in forwarded.body.get("tools") or [])
