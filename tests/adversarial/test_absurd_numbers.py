"""Numbers no honest client sends get a 400 that says what to change, never a 429 promising a
retry in 35 years, and never a limit Redis cannot count exactly."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from tests.conftest import FAKE_MODEL, Gateway
from tests.http import post
from tests.pipeline.support import CHAT, chat, envelope


def _admin(
    gateway: Gateway, method: str, path: str, body: dict[str, object]
) -> tuple[int, dict[str, object]]:
    request = urllib.request.Request(  # noqa: S310 -- loopback test gateway
        gateway.url + path, data=json.dumps(body).encode(), method=method
    )
    request.add_header("authorization", f"Bearer {gateway.admin_token}")
    request.add_header("content-type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, json.loads(exc.read())


@pytest.mark.parametrize("field", ["rpm", "tpm", "max_concurrency"])
def test_a_limit_past_what_redis_counts_exactly_is_refused(gateway: Gateway, field: str) -> None:
    team = gateway.new_team()
    status, body = _admin(gateway, "POST", "/admin/v1/keys", {"team": team, field: 2**64 - 1})
    assert status == 400, f"{field}: 2^64-1 was accepted ({status}): Redis counts in doubles"
    error = body["error"]
    assert isinstance(error, dict)
    assert error["param"] == field


def test_max_tokens_past_any_real_answer_is_a_400(gateway: Gateway) -> None:
    key = gateway.new_key()["key"]
    reply = post(f"{gateway.url}{CHAT}", chat(FAKE_MODEL, max_tokens=2**64 - 1), key=key)
    error = envelope(reply, 400)
    assert error["param"] == "max_tokens"


def test_a_request_whose_prompt_can_never_fit_its_token_limit_is_a_400_not_a_retry(gateway: Gateway) -> None:
    key = gateway.new_key(tpm=500)["key"]
    # ~750 prompt tokens (4 characters a token): more than the whole minute, whatever the output.
    long_prompt = [{"role": "user", "content": "x" * 3000}]
    reply = post(f"{gateway.url}{CHAT}", chat(FAKE_MODEL, messages=long_prompt, max_tokens=10), key=key)
    error = envelope(reply, 400)
    assert "tokens per minute" in error["message"], error
    assert "'tpm'" in error["message"], error
    assert "retry-after" not in {name.lower() for name in reply.headers}, (
        "a request larger than the limit itself was told to retry: no wait will ever admit it"
    )
    # A cap larger than the limit is no such request: it is admitted with what the limit grants.
    bounded = post(f"{gateway.url}{CHAT}", chat(FAKE_MODEL, max_tokens=100_000), key=key)
    assert bounded.status == 200, bounded.body
    assert bounded.headers["x-sluicegate-max-tokens-limited-by"] == "tokens_per_minute"
    assert 16 <= int(bounded.headers["x-sluicegate-max-tokens"]) < 500
