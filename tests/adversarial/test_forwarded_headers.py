"""What a worker learns about the client is what the gateway says, not what the client claims.

A worker (or whoever registered its endpoint) must never see a client's credential in any of the
header names SDKs use, must not be told a forged client address, and must not be handed headers the
client declared hop-by-hop or a `content-encoding` nobody applied to the body it gets.
"""

from __future__ import annotations

import http.client
import json
import secrets

from tests.conftest import FAKE_MODEL, Gateway, GatewayFactory, worker_record
from tests.http import post
from tests.pipeline.support import CHAT, chat

GATEWAY_ID = "x-sluicegate-request-id"


def _worker_headers(
    gateway: Gateway, fake_worker: str, headers: dict[str, str], key: str | None = None
) -> dict[str, str]:
    key = key or gateway.new_key()["key"]
    # http.client, not urllib: urllib replaces a `Connection` header with its own.
    host, port = gateway.url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        connection.request(
            "POST",
            CHAT,
            body=json.dumps(chat(FAKE_MODEL)),
            headers={"authorization": f"Bearer {key}", "content-type": "application/json", **headers},
        )
        reply = connection.getresponse()
        body = reply.read()
    finally:
        connection.close()
    assert reply.status == 200, body
    gateway_id = reply.headers.get(GATEWAY_ID)
    assert gateway_id is not None
    record = worker_record(fake_worker, gateway_id)
    assert record is not None, "the worker got no request under the gateway's id"
    seen: dict[str, str] = record["headers"]
    return seen


def test_credentials_and_forged_identity_never_reach_the_worker(gateway: Gateway, fake_worker: str) -> None:
    secret = "sk-other-" + secrets.token_hex(8)
    key = gateway.new_key()["key"]
    seen = _worker_headers(
        gateway,
        fake_worker,
        {
            "x-api-key": key,  # the same key both ways is accepted; neither copy may reach the worker
            "api-key": secret,
            "x-forwarded-for": "203.0.113.9",
            "forwarded": "for=203.0.113.9;proto=https",
            "x-forwarded-host": "evil.example",
            "x-real-ip": "203.0.113.9",
            "x-forwarded-proto": "https",
            "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        },
        key=key,
    )
    assert secret not in repr(seen), f"a client credential reached the worker: {sorted(seen)}"
    assert key not in repr(seen), f"the client's API key reached the worker: {sorted(seen)}"
    for forged in ("forwarded", "x-forwarded-host", "x-real-ip"):
        assert forged not in seen, f"the client's {forged} header reached the worker"
    assert seen.get("x-forwarded-for") == "127.0.0.1", (
        f"the worker was told the client is {seen.get('x-forwarded-for')!r}; the gateway's peer is 127.0.0.1 "
        "and is not a trusted proxy, so the client's own claim must be replaced"
    )
    assert seen.get("x-forwarded-proto") == "http"
    # Tracing is off in this gateway: it has no span of its own to name, and the client's is not
    # the worker's parent (tests/observability/test_tracing.py has the one the gateway sends).
    assert "traceparent" not in seen, "the client's raw traceparent reached the worker"


def test_headers_named_in_connection_and_content_encoding_are_dropped(
    gateway: Gateway, fake_worker: str
) -> None:
    seen = _worker_headers(
        gateway,
        fake_worker,
        {"connection": "keep-alive, x-hop-secret", "x-hop-secret": "for-the-next-hop-only", "x-kept": "yes"},
    )
    assert "x-hop-secret" not in seen, "a header the client declared hop-by-hop was forwarded"
    assert seen.get("x-kept") == "yes"


def test_a_trusted_proxy_extends_the_forwarded_chain(make_gateway: GatewayFactory, fake_worker: str) -> None:
    with make_gateway(trusted_proxies=("127.0.0.0/8",)) as gateway:
        seen = _worker_headers(
            gateway, fake_worker, {"x-forwarded-for": "198.51.100.7", "x-forwarded-proto": "https"}
        )
    assert seen.get("x-forwarded-for") == "198.51.100.7, 127.0.0.1", (
        f"behind a trusted proxy the worker got x-forwarded-for {seen.get('x-forwarded-for')!r}"
    )
    assert seen.get("x-forwarded-proto") == "https"


def test_a_gemini_clients_billing_project_and_trace_context_never_reach_the_worker(
    gateway: Gateway, fake_worker: str
) -> None:
    key = gateway.new_key()["key"]
    reply = post(
        f"{gateway.url}/v1beta/models/{FAKE_MODEL}:generateContent",
        {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]},
        headers={
            "x-goog-api-key": key,
            "x-goog-user-project": "billing-project-of-the-client",
            "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            "tracestate": "vendor=opaque",
        },
    )
    assert reply.status == 200, reply.body
    record = worker_record(fake_worker, reply.headers[GATEWAY_ID])
    assert record is not None
    seen = record["headers"]
    assert not {"x-goog-user-project", "traceparent", "tracestate", "x-goog-api-key"} & set(seen), seen
