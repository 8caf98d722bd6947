"""The Files and Batch API's pieces with no server: the directory store (whole objects or none,
ranged reads, listing, deletes), the streamed multipart reader cut at every byte, the validator."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from decimal import Decimal
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from gateway.apis.batch.upload import MultipartReader, body_chunks
from gateway.batch.engine import idle_for_batch
from gateway.batch.validation import Validator, span_of
from gateway.errors import ConfigError, GatewayError
from gateway.files.backends import open_storage
from gateway.files.directory import DirectoryStorage
from gateway.files.storage import StorageError, TooLarge
from gateway.model_file import parse_model_table
from gateway.model_table import ModelConfig, ModelTable, RoutingConfig
from gateway.observability.metrics import Metrics
from gateway.routing.policy import RouteRequest
from gateway.routing.router import Router


async def _chunks(*parts: bytes) -> AsyncIterator[bytes]:
    for part in parts:
        yield part


async def _read(store: DirectoryStorage, name: str, **span: int) -> bytes:
    return b"".join([chunk async for chunk in store.read(name, **span)])


def test_a_directory_store_keeps_objects_whole_or_not_at_all(tmp_path: Path) -> None:
    async def run() -> None:
        store = open_storage(f"file://{tmp_path}")
        assert isinstance(store, DirectoryStorage)
        size = await store.write("team/t1/file-a", _chunks(b"0123", b"456789"), max_bytes=100)
        assert size == 10
        assert await _read(store, "team/t1/file-a") == b"0123456789"
        assert await _read(store, "team/t1/file-a", start=2, end=5) == b"234"
        stat = await store.stat("team/t1/file-a")
        assert stat is not None
        assert stat.size == 10
        with pytest.raises(TooLarge):
            await store.write("team/t1/file-b", _chunks(b"x" * 60, b"y" * 60), max_bytes=100)
        assert await store.stat("team/t1/file-b") is None
        # Nothing half-written is left or listed: only the object that was kept.
        assert [o.name for o in [o async for o in store.list("team/")]] == ["team/t1/file-a"]
        assert sorted(p.name for p in (tmp_path / "team" / "t1").iterdir()) == ["file-a"]
        with pytest.raises(StorageError):
            await store.write("team/../../etc", _chunks(b"x"), max_bytes=10)
        with pytest.raises(FileNotFoundError):
            await _read(store, "team/t1/missing")
        await store.delete(["team/t1/file-a", "team/t1/missing"])
        assert [o async for o in store.list("")] == []

    asyncio.run(run())


BODY = (
    b"--XyZ\r\n"
    b'Content-Disposition: form-data; name="purpose"\r\n\r\n'
    b"batch\r\n"
    b"--XyZ\r\n"
    b'Content-Disposition: form-data; name="file"; filename="in.jsonl"\r\n'
    b"Content-Type: application/octet-stream\r\n\r\n"
    b'{"a": "--XyZ is not a boundary here"}\n\r\n{"b": 2}\n'
    b"\r\n--XyZ--\r\n"
)


@pytest.mark.parametrize("cut", [1, 2, 3, 5, 7, 11, 64, len(BODY)])
def test_the_multipart_reader_reads_any_chunking(cut: int) -> None:
    async def run() -> list[tuple[str, str | None, bytes]]:
        chunks = [BODY[i : i + cut] for i in range(0, len(BODY), cut)]
        reader = MultipartReader(_chunks(*chunks), b"XyZ")
        parts = []
        while (part := await reader.next_part()) is not None:
            parts.append((part[0], part[1], b"".join([c async for c in reader.read()])))
        return parts

    assert asyncio.run(run()) == [
        ("purpose", None, b"batch"),
        ("file", "in.jsonl", b'{"a": "--XyZ is not a boundary here"}\n\r\n{"b": 2}\n'),
    ]


def test_a_multipart_body_cut_short_is_a_400() -> None:
    async def run() -> None:
        reader = MultipartReader(_chunks(BODY[:120]), b"XyZ")
        while await reader.next_part() is not None:
            async for _ in reader.read():
                pass

    with pytest.raises(GatewayError) as caught:
        asyncio.run(run())
    assert caught.value.status == 400


def test_the_validator_keeps_each_lines_span_and_names_bad_lines() -> None:
    good = (
        b'{"custom_id": "a", "method": "POST", "url": "/v1/embeddings", "body": {"model": "m", "input": "x"}}'
    )
    other = good.replace(b'"a"', b'"b"')
    text = good + b"\n\n" + other + b"\r\n" + b"[1]\n" + good + b"\n"
    validator = Validator("/v1/embeddings")
    for i in range(0, len(text), 7):
        validator.feed(text[i : i + 7])
    validator.finish()
    assert validator.model == "m"
    assert [(e["line"], e["code"]) for e in validator.errors] == [
        (4, "invalid_request"),
        (5, "duplicate_custom_id"),
    ]
    index = validator.index()
    first = span_of(index[0:16])
    second = span_of(index[16:32])
    assert text[first[0] : first[1]] == good
    assert text[second[0] : second[1]].strip() == other


def test_a_line_too_long_is_refused_without_being_held(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("gateway.batch.validation.MAX_LINE_BYTES", 100)
    good = (
        b'{"custom_id": "a", "method": "POST", "url": "/v1/embeddings", "body": {"model": "m", "input": "x"}}'
    )
    validator = Validator("/v1/embeddings")
    for chunk in (good + b"\n", b"x" * 80, b"x" * 80, b"x" * 80, b"\n", good.replace(b'"a"', b'"b"'), b"\n"):
        validator.feed(chunk)
    validator.finish()
    assert [(e["line"], e["code"]) for e in validator.errors] == [(2, "line_too_long")]
    assert validator.total == 2
    second = span_of(validator.index()[16:32])
    assert second[1] - second[0] == len(good)


def test_a_line_starts_only_on_capacity_interactive_requests_leave() -> None:
    async def run() -> None:
        table = ModelTable(
            (
                ModelConfig(
                    name="m",
                    endpoints=("http://w:1",),
                    routing=RoutingConfig(max_inflight_per_endpoint=4, batch_share=0.5, fairness="requests"),
                ),
            )
        )
        router = Router(table, Metrics(CollectorRegistry()), rng=random.Random(1))
        route = router.resolve("m")
        assert route is not None
        pool = route.pools[0]
        endpoint = pool.endpoints[0]
        assert idle_for_batch(route, 0)
        assert not idle_for_batch(route, 2)  # this replica's lines at their share (0.5 x 4)
        endpoint.inflight = 1
        assert idle_for_batch(route, 1, starting=0)
        # One line just started beside an interactive request: at the share before it holds its slot.
        assert not idle_for_batch(route, 1, starting=1)
        endpoint.inflight = 2
        assert not idle_for_batch(route, 0)  # the pool's requests in flight at the share
        endpoint.inflight = 1
        endpoint.waiting = 1  # the engine reports a request waiting in its own queue
        assert not idle_for_batch(route, 0)
        endpoint.waiting = 0
        assert idle_for_batch(route, 0)
        # Every slot taken and an interactive request waiting in the pool's queue: no line starts,
        # and the one waiting is served first when a slot frees.
        endpoint.inflight = 4
        rng = random.Random(1)
        waiting = asyncio.ensure_future(pool.acquire(RouteRequest("m", team="t"), rng, (), 5.0))
        await asyncio.sleep(0)
        assert pool.queue
        endpoint.inflight = 1
        assert not idle_for_batch(route, 0)
        pool.release(endpoint)
        got, _ = await waiting
        assert got is endpoint
        assert idle_for_batch(route, 0)

    asyncio.run(run())


def test_an_upload_that_stalls_is_cut_with_a_408() -> None:
    async def run() -> None:
        sent = [{"type": "http.request", "body": b"x" * 10, "more_body": True}]
        stalled = asyncio.Event()

        async def receive() -> dict[str, object]:
            if sent:
                return sent.pop()
            await stalled.wait()  # never set: the client stopped sending
            return {}

        chunks = body_chunks(receive, min_rate=1000, window_s=0.05, max_bytes=1 << 20)
        assert await anext(chunks) == b"x" * 10
        await anext(chunks)

    with pytest.raises(GatewayError) as caught:
        asyncio.run(run())
    assert caught.value.status == 408


def test_the_model_table_takes_batch_share_and_a_batch_multiplier() -> None:
    table = parse_model_table(
        {
            "models": [
                {
                    "name": "m",
                    "endpoints": [{"url": "http://w:1"}],
                    "routing": {"batch_share": 0.25},
                    "price": {
                        "input_per_million": "0.20",
                        "output_per_million": "0.60",
                        "batch_multiplier": "0.5",
                    },
                }
            ]
        }
    )
    model = table.models[0]
    assert model.routing.batch_share == 0.25
    assert model.price is not None
    batched = model.price.batched()
    assert (batched.input_per_million, batched.output_per_million) == (Decimal("0.10"), Decimal("0.30"))
    assert batched.version != model.price.version
    for routing, price, field in (
        ({"batch_share": 1.5}, {}, "routing.batch_share"),
        ({}, {"batch_multiplier": "2"}, "price.batch_multiplier"),
    ):
        with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
            parse_model_table(
                {
                    "models": [
                        {
                            "name": "m",
                            "endpoints": [{"url": "http://w:1"}],
                            "routing": routing,
                            "price": {"input_per_million": "1", "output_per_million": "1", **price},
                        }
                    ]
                }
            )
