"""Native pass-through attacked: what a client could get around, and what a worker could answer, on
the routes that reach a stored response (each test failed before its fix)."""

from __future__ import annotations

import secrets
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from gateway.model_table import NATIVE, ModelConfig, ModelTable, Protocols
from tests.conftest import FAKE_MODEL, GatewayFactory
from tests.http import Reply, call
from tests.servers import run_uvicorn
from workers.fake.app import create_app as create_fake_worker

NATIVE_MODEL = "native-review"
pytestmark = pytest.mark.timeout(60)


def _native(*endpoints: str) -> ModelTable:
    return ModelTable(
        (
            ModelConfig(
                name=NATIVE_MODEL,
                upstream_model=FAKE_MODEL,
                endpoints=endpoints,
                protocols=Protocols(messages=NATIVE, responses=NATIVE),
            ),
        )
    )


def _background_worker(seen: list[dict[str, Any]]) -> Starlette:
    """A Responses worker that, like vLLM/OpenAI for `background: true`, answers at once with a
    queued response (no usage) and generates afterwards; GET returns the finished response."""

    async def create(request: Request) -> JSONResponse:
        body = await request.json()
        seen.append(body)
        return JSONResponse(
            {
                "id": "resp_bg0001",
                "object": "response",
                "status": "queued",
                "model": body["model"],
                "output": [],
                "usage": None,
                "background": True,
            }
        )

    async def get(request: Request) -> JSONResponse:
        return JSONResponse(
            {
                "id": "resp_bg0001",
                "object": "response",
                "status": "completed",
                "model": FAKE_MODEL,
                "output": [
                    {
                        "type": "message",
                        "role": "assistant",
                        "content": [{"type": "output_text", "text": "x " * 50000}],
                    }
                ],
                "usage": {"input_tokens": 3, "output_tokens": 50000, "total_tokens": 50003},
            }
        )

    return Starlette(
        routes=[
            Route("/v1/responses", create, methods=["POST"]),
            Route("/v1/responses/{rid}", get, methods=["GET"]),
        ]
    )


def test_background_responses_cannot_generate_unmetered_tokens(make_gateway: GatewayFactory) -> None:
    """`background: true` on a native pool: the worker answers `queued` (usage null), the gateway
    meters its estimate (~0 output) and releases every limit, the worker then generates up to
    max_output_tokens (or unbounded) and the client fetches it with GET, which 'meters nothing'.
    A client therefore bypasses tpm, daily/monthly budgets and concurrency. The gateway must
    refuse `background` on native pools (or meter the background generation)."""
    seen: list[dict[str, Any]] = []
    with run_uvicorn(_background_worker(seen)) as worker, make_gateway(_native(worker)) as gw:
        key = gw.new_key()
        r = call(
            "POST",
            f"{gw.url}/v1/responses",
            key=key["key"],
            body={"model": NATIVE_MODEL, "input": "hi", "background": True, "store": True},
        )
        assert r.status == 400, (r.status, r.body, seen)
        assert r.json()["error"]["param"] == "background"
        assert not seen  # nothing reached the worker


def test_previous_response_id_on_an_endpoint_that_is_gone_is_a_404(make_gateway: GatewayFactory) -> None:
    """docs/api.md: previous_response_id goes to the endpoint that holds it; 'if it is gone, 404'.
    pool._pinned raises PoolUnavailable, which Upstream.open turns into 503 no_healthy_upstream."""
    with (
        run_uvicorn(create_fake_worker([FAKE_MODEL])) as w1,
        run_uvicorn(create_fake_worker([FAKE_MODEL])) as w2,
    ):
        with make_gateway(_native(w1)) as gw_a:
            key = gw_a.new_key()
            first = call(
                "POST",
                f"{gw_a.url}/v1/responses",
                key=key["key"],
                body={"model": NATIVE_MODEL, "input": "hello"},
            )
            assert first.status == 200, first.body
            rid = first.json()["id"]
        # The same model, its pool now without w1 (w1 was scaled away).
        with make_gateway(_native(w2)) as gw_b:
            later = call(
                "POST",
                f"{gw_b.url}/v1/responses",
                key=key["key"],
                body={"model": NATIVE_MODEL, "input": "again", "previous_response_id": rid},
            )
            got = call("GET", f"{gw_b.url}/v1/responses/{rid}", key=key["key"])
        assert got.status == 404, got.body
        assert later.status == 404, later.body
        assert later.json()["error"]["param"] == "previous_response_id"


def _stored_error_worker(status: int, body: bytes, ctype: str) -> Starlette:
    # Each worker its own id: a holder is written once (NX), for the team that made it first.
    response_id = "resp_" + secrets.token_hex(8)

    async def create(request: Request) -> JSONResponse:
        b = await request.json()
        return JSONResponse(
            {
                "id": response_id,
                "object": "response",
                "status": "completed",
                "model": b["model"],
                "output": [],
                "usage": {"input_tokens": 1, "output_tokens": 1, "total_tokens": 2},
            }
        )

    from starlette.responses import Response

    async def get(request: Request) -> Response:
        return Response(body, status_code=status, media_type=ctype)

    return Starlette(
        routes=[
            Route("/v1/responses", create, methods=["POST"]),
            Route("/v1/responses/{rid}", get, methods=["GET", "DELETE"]),
        ]
    )


@pytest.mark.parametrize(
    ("status", "body", "ctype"),
    [
        (404, b'{"object":"error","message":"nope","type":"NotFoundError","code":404}', "application/json"),
        (500, b"<html>boom</html>", "text/html"),
        (200, b"[1,2]", "application/json"),
        (204, b"", "application/json"),
    ],
)
def test_stored_route_worker_errors_are_in_the_openai_envelope(
    make_gateway: GatewayFactory, status: int, body: bytes, ctype: str
) -> None:
    with (
        run_uvicorn(_stored_error_worker(status, body, ctype)) as worker,
        make_gateway(_native(worker)) as gw,
    ):
        key = gw.new_key()["key"]
        first = call(
            "POST", f"{gw.url}/v1/responses", key=key, body={"model": NATIVE_MODEL, "input": "hello"}
        )
        assert first.status == 200, first.body
        rid = first.json()["id"]
        for method in ("GET", "DELETE"):
            r: Reply = call(method, f"{gw.url}/v1/responses/{rid}", key=key)
            # A worker's refusal keeps its 4xx; anything else it answers is the gateway's 502.
            assert r.status == (status if 400 <= status < 500 else 502), r.body
            assert set(r.json()["error"]) == {"message", "type", "param", "code"}, r.body
        # No key: 401 on every stored route and method.
        for method, path in (
            ("GET", ""),
            ("HEAD", ""),
            ("DELETE", ""),
            ("POST", "/cancel"),
            ("GET", "/input_items"),
        ):
            r = call(method, f"{gw.url}/v1/responses/{rid}{path}")
            assert r.status == 401, (method, path, r.status)
