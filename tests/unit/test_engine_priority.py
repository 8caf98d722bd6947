"""The worker body's `priority` (gateway/proxy/translation/engine_priority.py): set by the gateway
for background requests to models with engine_priority, never by a client, never on interactive
requests. The real vLLM's side: tests/vllm/test_vllm_engine_priority.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from gateway.cli import main
from gateway.model_file import parse_model_table
from gateway.model_table import ModelConfig
from gateway.proxy.translation.engine_priority import BATCH_PRIORITY, with_engine_priority

PRIORITISED = ModelConfig(name="m", endpoints=("http://127.0.0.1:9",), engine_priority=True)
PLAIN = ModelConfig(name="m", endpoints=("http://127.0.0.1:9",))
LINE: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}


def test_a_background_request_to_a_prioritised_model_goes_behind_interactive_ones() -> None:
    body = with_engine_priority(LINE, PRIORITISED, background=True)
    assert body == {**LINE, "priority": BATCH_PRIORITY}
    assert BATCH_PRIORITY > 0  # vLLM serves smaller first; interactive requests have 0
    assert "priority" not in LINE  # the caller's body is left as it was


@pytest.mark.parametrize("client_priority", [-100, 0, BATCH_PRIORITY, 10**9, "1", None])
def test_a_client_s_own_priority_never_reaches_the_worker(client_priority: object) -> None:
    sent = {**LINE, "priority": client_priority}
    assert with_engine_priority(sent, PRIORITISED, background=True)["priority"] == BATCH_PRIORITY
    for model, background in ((PRIORITISED, False), (PLAIN, False), (PLAIN, True)):
        assert with_engine_priority(sent, model, background=background) == LINE


def test_interactive_requests_and_plain_models_get_no_field() -> None:
    assert with_engine_priority(LINE, PRIORITISED, background=False) is LINE
    # A server without --scheduling-policy priority answers 400 to any non-zero priority.
    assert with_engine_priority(LINE, PLAIN, background=True) is LINE


def test_engine_priority_is_a_checked_model_setting(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def model(extra: str) -> str:
        return f"models:\n  - name: m\n    endpoints:\n      - url: http://127.0.0.1:9\n{extra}"

    path = tmp_path / "models.yaml"
    for extra in (
        "    engine_priority: 1\n",
        "    engine_priority: 'true'\n",
        "    engine_fields: [priority]\n",
    ):
        path.write_text(model(extra))
        assert main(["check-config", str(path)]) == 2, extra
        err = capsys.readouterr().err
        assert "models[0].engine_" in err, err
    path.write_text(model("    engine_priority: true\n"))
    assert main(["check-config", str(path)]) == 0
    assert parse_model_table(yaml.safe_load(model("    engine_priority: true\n"))).models[0].engine_priority
    assert not parse_model_table(yaml.safe_load(model(""))).models[0].engine_priority
