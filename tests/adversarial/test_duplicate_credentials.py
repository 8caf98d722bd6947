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
