"""A path with a trailing slash that a route lacks (or the other way round): Starlette would answer
with a redirect whose Location it builds from the client's Host header, an open redirect to any
host. The gateway answers such paths as the paths they are: not found, with no Location.

A real gateway on a socket, raw requests with a forged Host."""

from __future__ import annotations

import pytest

from tests.adversarial.test_connection_limits import _connect, _one_response
from tests.conftest import Gateway
from tests.http import Reply
from tests.pipeline.support import envelope

EVIL = "evil.example"


def _get(gw: Gateway, path: str, **headers: str) -> tuple[int, dict[str, str], bytes]:
    extra = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
    with _connect(gw.url) as sock:
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: {EVIL}\r\n{extra}\r\n".encode())
        reply = _one_response(sock)
    return reply.status, reply.headers, reply.body


@pytest.mark.parametrize("path", ["/admin/v1/teams/", "/v1/models/", "/healthz/", "/admin/ui/teams/"])
def test_a_slash_that_no_route_has_is_not_redirected_to_the_clients_host(gateway: Gateway, path: str) -> None:
    token = gateway.new_key()["key"] if path.startswith("/v1/") else gateway.admin_token
    status, headers, body = _get(gateway, path, authorization=f"Bearer {token}")
    assert "location" not in headers, headers
    assert status == 404
    if not path.startswith("/admin/ui/"):  # the console answers with its own page
        envelope(Reply(status, headers, body), 404)
