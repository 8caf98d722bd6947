"""The client API registry (gateway.apis): each API's declarations reach the layers that use
them, and where a key may come from is read the same way everywhere."""

from __future__ import annotations

import pytest
from starlette.datastructures import Headers

from gateway.apis import APIS
from gateway.errors import ErrorCode, GatewayError
from gateway.http.context import RequestContext
from gateway.keys.credentials import BEARER, Credential, read_key, secret_headers
from gateway.proxy.forwarding import Forwarding

X_API_KEY = Credential(header="x-api-key")
QUERY_KEY = Credential(query="key")
ALL = (BEARER, X_API_KEY, QUERY_KEY)


def test_a_key_is_read_from_any_declared_place() -> None:
    assert read_key(ALL, Headers({"authorization": "Bearer sk-1"}), {}) == "sk-1"
    assert read_key(ALL, Headers({"x-api-key": "sk-2"}), {}) == "sk-2"
    assert read_key(ALL, Headers({}), {"key": "sk-3"}) == "sk-3"
    assert read_key(ALL, Headers({"authorization": "Basic sk-1"}), {}) is None
    # The same key twice is one key.
    assert read_key(ALL, Headers({"authorization": "Bearer sk-1", "x-api-key": "sk-1"}), {}) == "sk-1"


def test_two_different_keys_are_refused_whatever_their_places() -> None:
    with pytest.raises(GatewayError) as raised:
        read_key(ALL, Headers({"x-api-key": "sk-1"}), {"key": "sk-2"})
    assert raised.value.code is ErrorCode.INVALID_API_KEY
    assert "'?key=<key>'" in raised.value.message


def test_every_declared_credential_header_and_protocol_header_stays_with_the_gateway() -> None:
    credentials = [c for api in APIS for c in api.credentials]
    never = secret_headers(credentials) | {h for api in APIS for h in api.never_forward}
    assert {"authorization", "x-api-key", "anthropic-version"} <= never
    forwarding = Forwarding(never_forward=never)
    raw = [(name.encode(), b"secret") for name in sorted(never)] + [(b"openai-organization", b"org")]
    scope = {"type": "http", "headers": raw, "client": ("127.0.0.1", 1), "scheme": "http"}
    sent = forwarding.worker_headers(scope, RequestContext(request_id="r"))
    assert not never & set(sent)
    assert sent["openai-organization"] == "org"


def test_each_dialect_has_one_operation_and_each_api_one_name() -> None:
    names = [api.name for api in APIS]
    assert len(names) == len(set(names))
    dialects = [d for api in APIS for d in api.operations]
    assert len(dialects) == len(set(dialects))
    assert {"chat", "completions", "embeddings", "messages", "responses"} <= set(dialects)
