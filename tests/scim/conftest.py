"""Gateways serving /scim/v2 with a SCIM token, on the session's real Redis, and a small SCIM
client that sends requests as an IdP does (application/scim+json, a bearer token)."""

from __future__ import annotations

import json
import secrets
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from tests.conftest import Gateway, GatewayFactory

TOKEN = "scim-" + secrets.token_urlsafe(32)


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: Any


@dataclass
class Scim:
    """An IdP's SCIM client, pointed at one gateway."""

    url: str
    token: str = TOKEN

    def send(
        self, method: str, path: str, body: Any = None, token: str | None = None, raw: bytes | None = None
    ) -> Answer:
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        headers = {"content-type": "application/scim+json", "accept": "application/scim+json"}
        if token if token is not None else self.token:
            headers["authorization"] = f"Bearer {token if token is not None else self.token}"
        url = f"{self.url}/scim/v2{path}"
        request = urllib.request.Request(url, data=data, method=method, headers=headers)  # noqa: S310
        try:
            with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310 -- loopback
                text = response.read()
                return Answer(response.status, dict(response.headers), json.loads(text) if text else None)
        except urllib.error.HTTPError as exc:
            with exc:
                text = exc.read()
                return Answer(exc.code, dict(exc.headers), json.loads(text) if text else None)

    def ok(self, method: str, path: str, body: Any = None, status: int = 200) -> Any:
        answer = self.send(method, path, body)
        assert answer.status == status, (method, path, answer.status, answer.body)
        return answer.body

    def error(
        self, method: str, path: str, body: Any = None, status: int = 400, **kwargs: Any
    ) -> dict[str, Any]:
        answer = self.send(method, path, body, **kwargs)
        assert answer.status == status, (method, path, answer.status, answer.body)
        assert answer.headers["content-type"].startswith("application/scim+json"), answer.headers
        assert answer.body["schemas"] == ["urn:ietf:params:scim:api:messages:2.0:Error"], answer.body
        assert answer.body["status"] == str(status), answer.body
        error: dict[str, Any] = answer.body
        return error


def scim_of(gw: Gateway) -> Scim:
    gw.secrets_created.append(TOKEN)
    return Scim(gw.url)


@pytest.fixture
def scim_gateway(make_gateway: GatewayFactory) -> Iterator[Gateway]:
    with make_gateway(scim_token=TOKEN) as gw:
        yield gw


@pytest.fixture
def scim(scim_gateway: Gateway) -> Scim:
    return scim_of(scim_gateway)


def new_user(scim: Scim, **fields: Any) -> dict[str, Any]:
    name = fields.pop("userName", None) or f"u-{secrets.token_hex(4)}@example.com"
    body = {
        "schemas": ["urn:ietf:params:scim:schemas:core:2.0:User"],
        "userName": name,
        "active": True,
        "emails": [{"value": name, "primary": True, "type": "work"}],
        **fields,
    }
    user: dict[str, Any] = scim.ok("POST", "/Users", body, status=201)
    return user


def new_group(scim: Scim, *members: str, name: str | None = None, **fields: Any) -> dict[str, Any]:
    body = {
        **fields,
        "schemas": ["urn:ietf:params:scim:schemas:core:2.0:Group"],
        "displayName": name or f"g-{secrets.token_hex(4)}",
        "members": [{"value": m} for m in members],
    }
    group: dict[str, Any] = scim.ok("POST", "/Groups", body, status=201)
    return group
