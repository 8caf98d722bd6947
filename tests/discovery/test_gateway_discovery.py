"""Discovery wired into the real gateway: a model whose endpoints come from a Service's
EndpointSlices, and a model that exists only because a Service is labelled, both served through
the gateway on a real socket to the openai SDK while the fake API server changes the cluster."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

import openai
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

from gateway.model_table import KubernetesTarget, ModelConfig, ModelTable
from tests.conftest import FAKE_MODEL, Gateway, GatewayFactory
from tests.discovery.fake_apiserver import FakeApiServer
from tests.discovery.objects import endpoint, endpoint_slice, service
from tests.http import get
from tests.servers import run_uvicorn
from tests.waiting import wait_until

T = TypeVar("T")
NAMESPACE = "llm"


class ApiServerThread:
    """The fake API server on its own event loop, so that sync tests (and the sync SDK) can
    change the cluster while the gateway watches it from its own loop."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()
        self.server = FakeApiServer()
        self.call(lambda: None)
        asyncio.run_coroutine_threadsafe(self.server.start(), self.loop).result(10)

    def call(self, fn: Callable[[], T]) -> T:
        async def run() -> T:
            return fn()

        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(10)

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self.server.stop(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()


@pytest.fixture
def apiserver() -> Iterator[ApiServerThread]:
    thread = ApiServerThread()
    try:
        yield thread
    finally:
        thread.close()


def _answers(client: openai.OpenAI, model: str) -> bool:
    try:
        reply = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "hi"}])
    except openai.APIStatusError as exc:
        if exc.status_code != 503:  # only "no endpoint yet" is expected while the pool fills
            raise
        return False
    return reply.model == model and bool(reply.choices[0].message.content)


def _discovery_up(gw: Gateway) -> float:
    lines = get(f"{gw.url}/metrics").body.decode().splitlines()
    (value,) = [float(line.split()[1]) for line in lines if line.startswith("sluicegate_discovery_up ")]
    return value


def _worker_slice(worker_url: str, *, ready: bool = True) -> dict[str, Any]:
    parts = urlsplit(worker_url)
    assert parts.hostname is not None
    assert parts.port is not None
    return endpoint_slice(
        NAMESPACE, "llama-abc12", "llama", [endpoint(parts.hostname, ready=ready)], port=parts.port
    )


def test_a_pool_follows_its_service_endpoints(
    apiserver: ApiServerThread, make_gateway: GatewayFactory, fake_worker: str, tmp_path: Path
) -> None:
    kubeconfig = apiserver.call(lambda: apiserver.server.write_kubeconfig(tmp_path / "kubeconfig"))
    table = ModelTable(
        (
            ModelConfig(
                name="llama",
                upstream_model=FAKE_MODEL,
                kubernetes=KubernetesTarget(service="llama", namespace=NAMESPACE, port="http"),
            ),
        )
    )
    with make_gateway(table, kubeconfig=str(kubeconfig)) as gw:
        client = gw.client(gw.new_key()["key"])
        with pytest.raises(openai.APIStatusError) as refused:
            client.chat.completions.create(model="llama", messages=[{"role": "user", "content": "hi"}])
        assert refused.value.status_code == 503  # no endpoint known yet: a clear 503, no hang

        apiserver.call(lambda: apiserver.server.put("endpointslices", _worker_slice(fake_worker)))
        wait_until(lambda: _answers(client, "llama"), 10, "the discovered endpoint answers")
        (pool,) = next(m for m in gw.admin.call("GET", "/admin/v1/models")["data"] if m["name"] == "llama")[
            "pools"
        ]
        assert [e["url"] for e in pool["endpoints"]] == [fake_worker]

        assert _discovery_up(gw) == 1
        not_ready = _worker_slice(fake_worker, ready=False)
        apiserver.call(lambda: apiserver.server.put("endpointslices", not_ready))
        wait_until(lambda: not _answers(client, "llama"), 10, "a not-ready endpoint takes no traffic")

        asyncio.run_coroutine_threadsafe(apiserver.server.go_down(), apiserver.loop).result(10)
        wait_until(lambda: _discovery_up(gw) == 0, 5, "an unreachable API server shows in the metric")
        asyncio.run_coroutine_threadsafe(apiserver.server.come_back(), apiserver.loop).result(10)
        wait_until(lambda: _discovery_up(gw) == 1, 10, "the metric recovers with the API server")


def test_a_labelled_service_becomes_a_model(
    apiserver: ApiServerThread, make_gateway: GatewayFactory, fake_worker: str, tmp_path: Path
) -> None:
    kubeconfig = apiserver.call(lambda: apiserver.server.write_kubeconfig(tmp_path / "kubeconfig"))
    labelled = service(
        NAMESPACE,
        "llama",
        model_label="llama-3",
        annotations={"sluicegate.io/aliases": "llama", "sluicegate.io/upstream-model": FAKE_MODEL},
    )
    with make_gateway(
        ModelTable(()),
        kubeconfig=str(kubeconfig),
        kubernetes_autodiscovery=True,
        kubernetes_namespaces=(NAMESPACE,),
    ) as gw:
        client = gw.client(gw.new_key()["key"])
        assert [m.id for m in client.models.list()] == []

        apiserver.call(lambda: apiserver.server.put("services", labelled))
        apiserver.call(lambda: apiserver.server.put("endpointslices", _worker_slice(fake_worker)))
        wait_until(
            lambda: {m.id for m in client.models.list()} == {"llama-3", "llama"}, 10, "the model is listed"
        )
        wait_until(lambda: _answers(client, "llama-3"), 10, "the autodiscovered model answers")

        apiserver.call(lambda: apiserver.server.delete("services", NAMESPACE, "llama"))
        wait_until(lambda: [m.id for m in client.models.list()] == [], 10, "the model goes with its Service")
        with pytest.raises(openai.NotFoundError):
            client.chat.completions.create(model="llama-3", messages=[{"role": "user", "content": "hi"}])


def _held_stream_worker(released: threading.Event) -> Starlette:
    """A worker whose streams send three tokens, then wait for `released` before the rest."""

    def chunk(payload: dict[str, Any]) -> bytes:
        return b"data: " + json.dumps(payload).encode() + b"\n\n"

    def token(i: int) -> bytes:
        delta = {"index": 0, "delta": {"content": f"t{i} "}, "finish_reason": None}
        return chunk({"object": "chat.completion.chunk", "model": FAKE_MODEL, "choices": [delta]})

    async def models(request: Request) -> JSONResponse:
        return JSONResponse({"object": "list", "data": [{"id": FAKE_MODEL, "object": "model"}]})

    async def chat(request: Request) -> StreamingResponse:
        async def body() -> AsyncIterator[bytes]:
            for i in range(3):
                yield token(i)
            await asyncio.get_running_loop().run_in_executor(None, released.wait, 60)
            for i in range(3, 6):
                yield token(i)
            yield b"data: [DONE]\n\n"

        return StreamingResponse(body(), media_type="text/event-stream")

    return Starlette(
        routes=[Route("/v1/models", models), Route("/v1/chat/completions", chat, methods=["POST"])]
    )


def test_a_terminating_endpoint_takes_no_new_request_while_its_streams_finish(
    apiserver: ApiServerThread, make_gateway: GatewayFactory, tmp_path: Path
) -> None:
    kubeconfig = apiserver.call(lambda: apiserver.server.write_kubeconfig(tmp_path / "kubeconfig"))
    table = ModelTable(
        (
            ModelConfig(
                name="llama",
                upstream_model=FAKE_MODEL,
                kubernetes=KubernetesTarget(service="llama", namespace=NAMESPACE, port="http"),
            ),
        )
    )
    released = threading.Event()
    with (
        run_uvicorn(_held_stream_worker(released)) as worker,
        make_gateway(table, kubeconfig=str(kubeconfig)) as gw,
    ):
        client = gw.client(gw.new_key()["key"])
        parts = urlsplit(worker)
        host, port = parts.hostname, parts.port
        assert host is not None
        assert port is not None
        slice_ = endpoint_slice(NAMESPACE, "llama-abc12", "llama", [endpoint(host)], port=port)
        apiserver.call(lambda: apiserver.server.put("endpointslices", slice_))
        wait_until(lambda: _pool_states(gw) == ["healthy"], 10, "the endpoint is confirmed")
        try:
            stream = client.chat.completions.create(
                model="llama", messages=[{"role": "user", "content": "hi"}], stream=True
            )
            first = [next(stream) for _ in range(3)]
            assert [c.choices[0].delta.content for c in first] == ["t0 ", "t1 ", "t2 "]
            # The pod is being deleted: Kubernetes marks its endpoint terminating (and not ready).
            leaving = [endpoint(host, ready=False, terminating=True)]
            apiserver.call(
                lambda: apiserver.server.put(
                    "endpointslices",
                    endpoint_slice(NAMESPACE, "llama-abc12", "llama", leaving, port=port),
                )
            )
            wait_until(
                lambda: not _answers(client, "llama"), 10, "a terminating endpoint takes no new request"
            )
        finally:
            released.set()
        rest = [c.choices[0].delta.content for c in stream if c.choices]
        assert rest == ["t3 ", "t4 ", "t5 "]  # the stream in flight finished on the leaving pod


def _pool_states(gw: Gateway) -> list[str]:
    (model,) = [m for m in gw.admin.call("GET", "/admin/v1/models")["data"] if m["name"] == "llama"]
    return [e["state"] for pool in model["pools"] for e in pool["endpoints"]]
