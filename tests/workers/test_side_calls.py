"""The calls beside a request's own (a stored response read back, a token count, probes and
scrapes) go through the one worker client (gateway/worker/client.py, `fetch`): asking for identity,
bounded in size, a connection reused, and never sent twice once the worker may have read them."""

from __future__ import annotations

import asyncio
import random

import pytest

from gateway.errors import GatewayError
from gateway.model_table import ModelConfig, ModelTable
from gateway.observability.metrics import Metrics
from gateway.proxy.upstream import Upstream
from gateway.routing.monitor import Monitor
from gateway.routing.router import Router
from gateway.worker.client import WorkerClient
from tests.waiting import eventually
from tests.workers.test_worker_answers_pinned import first_then_dropped
from tests.workers.test_worker_client import OK, Server, answering

GET_OK = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nRetry-After: 3\r\ncontent-length: 2\r\n\r\n{}"


def _upstream() -> Upstream:
    return Upstream(WorkerClient(), Router(ModelTable(()), Metrics(), rng=random.Random(1)), Metrics())


async def _call(
    upstream: Upstream, server: Server, *, max_bytes: int = 1024
) -> tuple[int, bytes, dict[str, str]]:
    answer = await upstream.call_endpoint(
        "GET",
        f"{server.url}/v1/responses/resp_1?include=x",
        body=None,
        headers={"x-request-id": "r1"},
        connect_s=5,
        total_s=10,
        max_bytes=max_bytes,
    )
    return answer.status, answer.body, dict(answer.headers)


def test_a_side_call_asks_for_identity_reuses_its_connection_and_reads_headers_in_lower_case() -> None:
    async def scenario() -> tuple[list[tuple[int, bytes, dict[str, str]]], int, bytes]:
        async with Server(answering(GET_OK)) as server:
            upstream = _upstream()
            answers = [await _call(upstream, server), await _call(upstream, server)]
            await upstream.aclose()
            return answers, server.connections, server.requests[0]

    answers, connections, request = asyncio.run(scenario())
    assert [(status, body, headers.get("retry-after")) for status, body, headers in answers] == [
        (200, b"{}", "3")
    ] * 2
    assert connections == 1
    assert request.startswith(b"GET /v1/responses/resp_1?include=x HTTP/1.1\r\n")
    assert b"\r\nAccept-Encoding: identity\r\n" in request


def test_a_side_call_past_its_bound_is_an_upstream_error() -> None:
    async def scenario() -> str:
        async with Server(answering(OK)) as server:
            upstream = _upstream()
            with pytest.raises(GatewayError) as caught:
                await _call(upstream, server, max_bytes=1)
            await upstream.aclose()
            return caught.value.code.wire_code

    assert asyncio.run(scenario()) == "upstream_error"


def test_a_side_call_the_worker_read_and_dropped_on_a_pooled_connection_is_not_sent_again() -> None:
    async def scenario() -> tuple[str, int, int]:
        async with Server(first_then_dropped(GET_OK)) as server:
            upstream = _upstream()
            await _call(upstream, server)
            with pytest.raises(GatewayError) as caught:
                await _call(upstream, server)
            await upstream.aclose()
            return caught.value.code.wire_code, len(server.requests), server.connections

    assert asyncio.run(scenario()) == ("upstream_error", 2, 1)


def test_the_monitors_checks_go_through_the_worker_client_it_is_given() -> None:
    """A pending endpoint's confirmation (GET /v1/models) on the app's one worker client: it asks
    for identity, and its connection is that client's (closed with it)."""

    async def scenario() -> tuple[bytes, bool]:
        models = b'{"object":"list","data":[{"id":"m","object":"model"}]}'
        answer = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (
            len(models),
            models,
        )
        async with Server(answering(answer)) as server:
            client = WorkerClient()
            table = ModelTable((ModelConfig(name="m", endpoints=(server.url,)),))
            monitor = Monitor(Router(table, Metrics(), rng=random.Random(1)), client, tick_s=0.01)
            monitor.start()
            await eventually(lambda: server.requests, "a confirmation")
            await monitor.stop()
            await client.aclose()
            await asyncio.wait_for(server.closed.wait(), 10)
            return server.requests[0], server.closed.is_set()

    request, closed = asyncio.run(scenario())
    assert request.startswith(b"GET /v1/models HTTP/1.1\r\n")
    assert b"\r\nAccept-Encoding: identity\r\n" in request
    assert closed
