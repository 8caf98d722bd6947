"""A request that carries two different keys in one header sent twice (two `Authorization`, or two
`x-api-key`): refused with 401, as `Authorization` together with `x-api-key` already is; which team
pays must never depend on which copy a reader takes. The same key twice is one key.

A real gateway; raw http.client requests, which can repeat a header."""

from __future__ import annotations

import http.client
import json

import pytest

from tests.conftest import FAKE_MODEL, Gateway
from tests.http import Reply
from tests.pipeline.support import envelope

CHAT = ("/v1/chat/completions", "authorization", "Bearer {}")
MESSAGES = ("/v1/messages", "x-api-key", "{}")


def _send(gw: Gateway, path: str, header: str, values: list[str]) -> Reply:
    host, port = gw.url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    body = {"model": FAKE_MODEL, "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}
    try:
        conn.putrequest("POST", path)
        conn.putheader("content-type", "application/json")
        for value in values:
            conn.putheader(header, value)
        data = json.dumps(body).encode()
        conn.putheader("content-length", str(len(data)))
        conn.endheaders(data)
        response = conn.getresponse()
        return Reply(response.status, {k.lower(): v for k, v in response.getheaders()}, response.read())
    finally:
        conn.close()


@pytest.mark.parametrize(("path", "header", "form"), [CHAT, MESSAGES])
def test_two_different_keys_in_a_repeated_header_are_refused(
    gateway: Gateway, path: str, header: str, form: str
) -> None:
    mine, theirs = gateway.new_key()["key"], gateway.new_key()["key"]
    refused = _send(gateway, path, header, [form.format(theirs), form.format(mine)])
    assert refused.status == 401, refused.body
    if path == CHAT[0]:
        assert "Two different API keys" in envelope(refused, 401, "invalid_api_key")["message"]
    assert _send(gateway, path, header, [form.format(mine), form.format(mine)]).status == 200


def _admin_get(gw: Gateway, tokens: list[str]) -> int:
    host, port = gw.url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        conn.putrequest("GET", "/admin/v1/teams")
        for token in tokens:
            conn.putheader("authorization", f"Bearer {token}")
        conn.endheaders()
        response = conn.getresponse()
        response.read()
        return response.status
    finally:
        conn.close()


def test_two_different_admin_tokens_are_refused_whichever_comes_first(gateway: Gateway) -> None:
    """The admin API reads its token as strictly as a client key: the right token beside a wrong one
    is not believed, in either order."""
    right, wrong = gateway.admin_token, "adm-" + "x" * 43
    # The statuses alone: a failing assert must not print the token.
    statuses = [_admin_get(gateway, t) for t in ([right, wrong], [wrong, right], [right, right], [right])]
    assert statuses == [401, 401, 200, 200]
