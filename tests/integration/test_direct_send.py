"""A stream's events go to the server's own send (gateway/seams/starlette.py), and what offered
it leaves no reference cycle behind: each request's server object (uvicorn's cycle, which holds
its scope) is freed when the request ends, not left for the garbage collector."""

from __future__ import annotations

import gc
import http.client
import json
import secrets

from uvicorn.protocols.http.httptools_impl import RequestResponseCycle

from tests.conftest import FAKE_MODEL, Gateway

REQUESTS = 10


def _cycles_in(objects: list[object], marker: bytes) -> int:
    """The server request objects among `objects` of requests that carried `marker` in a header
    (the gateway's, and the worker's behind it): other tests' servers run in this process too."""
    return sum(
        isinstance(o, RequestResponseCycle) and any(marker in value for _, value in o.scope["headers"])
        for o in objects
    )


def test_streamed_requests_leave_no_server_object_for_the_garbage_collector(gateway: Gateway) -> None:
    key = gateway.new_key()["key"]
    host, port = gateway.url.removeprefix("http://").split(":")
    body = json.dumps({"model": FAKE_MODEL, "stream": True, "messages": [{"role": "user", "content": "hi"}]})
    marker = secrets.token_hex(8)
    headers = {"content-type": "application/json", "authorization": f"Bearer {key}", "x-request-id": marker}
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)  # what the collector frees is kept in gc.garbage to be counted
    try:
        conn = http.client.HTTPConnection(host, int(port), timeout=30)
        for _ in range(REQUESTS):
            conn.request("POST", "/v1/chat/completions", body=body, headers=headers)
            reply = conn.getresponse()
            assert reply.status == 200
            assert reply.read().rstrip().endswith(b"data: [DONE]")
        conn.close()
        gc.collect()
        left_for_the_collector = _cycles_in(gc.garbage, marker.encode())
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    assert left_for_the_collector == 0
