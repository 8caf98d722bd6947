"""A bug on the path (an exception nobody anticipated) still settles the request once: the client
gets a 500 in the API's envelope, and the slot, the reservation and the gauge are given back."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from gateway.apis.openai import dialect as openai_dialect
from tests.conftest import FAKE_MODEL, GatewayFactory
from tests.http import post
from tests.pipeline.support import CHAT, chat, envelope, wait_inflight_zero, wait_requests_metered
from tests.pipeline.test_settlement import _assert_settled, _budgeted_key, _follow_up


def test_an_exception_nobody_anticipated_still_settles_the_request(
    make_gateway: GatewayFactory, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: Any, **kwargs: Any) -> bytes:
        raise RuntimeError("a bug in rendering the answer")

    with make_gateway() as gw:
        team, key = _budgeted_key(gw)
        with monkeypatch.context() as patch:
            patch.setattr(openai_dialect.OpenAIDialect, "whole", broken)
            reply = post(f"{gw.url}{CHAT}", chat(FAKE_MODEL), key=key, headers={"x-fake-tokens": "3"})
        envelope(reply, 500, "internal_error")
        assert "a bug" not in reply.body.decode()  # the message is ours, not the exception's
        totals = wait_requests_metered(gw, team, 1)
        assert totals["errors"] == 1
        _assert_settled(gw, redis_client, team, 1, "an unexpected exception")
        wait_inflight_zero(gw)
        _follow_up(gw, key, "an unexpected exception")
