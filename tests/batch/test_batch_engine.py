"""The engine's rules, seen from outside: lines run only on capacity interactive requests leave
(none of them ever queues behind a line), a failing line goes to the error file and never fails
the batch, a cancel keeps what finished, the completion window's end expires the rest."""

from __future__ import annotations

import concurrent.futures
import io
import json
import time
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import openai
import pytest
import redis

from gateway.model_table import ModelConfig, ModelTable, RoutingConfig
from gateway.pricing import Price
from gateway.proxy.translation.engine_priority import BATCH_PRIORITY
from gateway.redis import keys
from tests.batch.conftest import (
    DefaultHeaders,
    batch_request_counts,
    chat_lines,
    jsonl,
    metric_values,
    slow_worker,
    upload,
    wait_for_batch,
)
from tests.conftest import FAKE_MODEL, Gateway, GatewayFactory, worker_record
from tests.servers import run_uvicorn
from tests.waiting import wait_until
from workers.fake.app import create_app as create_fake_worker


def _table(worker: str) -> ModelTable:
    # 4 slots: batch_share 0.5 (the default) leaves 2 to batch lines, 2 to interactive requests.
    return ModelTable(
        (
            ModelConfig(
                name=FAKE_MODEL, endpoints=(worker,), routing=RoutingConfig(max_inflight_per_endpoint=4)
            ),
        )
    )


@pytest.fixture
def slow_gateway(make_gateway: GatewayFactory, files_dir: Path) -> Iterator[Gateway]:
    with (
        slow_worker(150) as worker,
        make_gateway(_table(worker), files_url=f"file://{files_dir}", batch_poll_interval_s=0.02) as gw,
    ):
        yield gw


def _batch(client: openai.OpenAI, lines: int, **body: Any) -> str:
    file_id = upload(client, chat_lines(lines, **body))
    return client.batches.create(
        input_file_id=file_id, endpoint="/v1/chat/completions", completion_window="24h"
    ).id


def test_interactive_requests_never_queue_behind_batch_lines(slow_gateway: Gateway) -> None:
    client = slow_gateway.client(slow_gateway.new_key()["key"])
    batch_id = _batch(client, 16)
    wait_until(lambda: client.batches.retrieve(batch_id).status == "in_progress", 30, "the batch started")

    def ask(_: int) -> str:
        answer = client.chat.completions.create(
            model=FAKE_MODEL, messages=[{"role": "user", "content": "hi"}]
        )
        return answer.choices[0].message.content or ""

    # Interactive requests the whole time the batch runs, two at once (the slots batch lines leave).
    rounds = 0
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        while client.batches.retrieve(batch_id).status == "in_progress" or rounds < 3:
            assert all(pool.map(ask, range(2)))
            rounds += 1
    done = wait_for_batch(client, batch_id)
    assert done.status == "completed"
    assert done.request_counts is not None
    assert done.request_counts.completed == 16
    # No request ever waited in the pool's queue: lines took only free slots, below their share.
    assert sum(metric_values(slow_gateway.url, "sluicegate_queue_wait_seconds_count")) == 0
    assert rounds >= 3


def test_a_budget_refusal_fails_the_line_not_the_batch(batch_gateway: Gateway) -> None:
    team = batch_gateway.new_team()
    client = batch_gateway.client(batch_gateway.new_key(team=team, daily_tokens=60)["key"])
    done = wait_for_batch(client, _batch(client, 8, max_tokens=8))
    assert done.status == "completed"
    assert done.request_counts is not None
    assert done.request_counts.failed > 0
    assert done.request_counts.completed + done.request_counts.failed == 8
    assert done.error_file_id is not None
    errors = jsonl(client.files.content(done.error_file_id).text)
    assert len(errors) == done.request_counts.failed
    for line in errors:
        assert line["response"]["status_code"] == 429
        assert line["response"]["body"]["error"]["code"] == "insufficient_quota"


def test_a_worker_failure_is_retried_once_then_fails_the_line(
    make_gateway: GatewayFactory, files_dir: Path
) -> None:
    failing = DefaultHeaders(create_fake_worker([FAKE_MODEL]), {"x-fake-status": "500"})
    with run_uvicorn(failing) as worker, make_gateway(_table(worker), files_url=f"file://{files_dir}") as gw:
        client = gw.client(gw.new_key()["key"])
        done = wait_for_batch(client, _batch(client, 3))
        assert done.status == "completed"
        assert done.request_counts is not None
        assert (done.request_counts.completed, done.request_counts.failed) == (0, 3)
        assert done.output_file_id is None
        assert done.error_file_id is not None
        assert {
            line["response"]["status_code"] for line in jsonl(client.files.content(done.error_file_id).text)
        } == {502}
        # Each line ran twice: once retried, once failed.
        assert sum(metric_values(gw.url, 'sluicegate_batch_lines_total{outcome="retried"')) == 3
        assert sum(metric_values(gw.url, 'sluicegate_batch_lines_total{outcome="failed"')) == 3


def test_a_cancel_stops_new_lines_and_keeps_what_finished(slow_gateway: Gateway) -> None:
    client = slow_gateway.client(slow_gateway.new_key()["key"])
    batch_id = _batch(client, 30)
    wait_until(lambda: batch_request_counts(client, batch_id)[1] >= 2, 30, "lines done")
    cancelling = client.batches.cancel(batch_id)
    assert cancelling.status in ("cancelling", "cancelled")
    done = wait_for_batch(client, batch_id)
    assert done.status == "cancelled"
    assert done.cancelled_at is not None
    assert done.request_counts is not None
    finished = done.request_counts.completed
    assert 2 <= finished < 30
    assert done.output_file_id is not None
    assert len(jsonl(client.files.content(done.output_file_id).text)) == finished


def test_the_windows_end_expires_the_lines_not_run(slow_gateway: Gateway, redis_client: redis.Redis) -> None:
    key = slow_gateway.new_key()
    client = slow_gateway.client(key["key"])
    batch_id = _batch(client, 30)
    wait_until(lambda: batch_request_counts(client, batch_id)[1] >= 2, 30, "lines done")
    # The 24 h window, ended now.
    record = keys.batch_record(key["team"], batch_id)
    spec = json.loads(redis_client.hget(record, "spec"))  # type: ignore[arg-type]
    spec["expires_at"] = int(time.time()) - 1
    redis_client.hset(record, "spec", json.dumps(spec))
    done = wait_for_batch(client, batch_id)
    assert done.status == "expired"
    assert done.expired_at is not None
    assert done.request_counts is not None
    assert done.request_counts.completed + done.request_counts.failed == 30
    assert done.error_file_id is not None
    expired = [line for line in jsonl(client.files.content(done.error_file_id).text) if line["error"]]
    assert expired
    assert {line["error"]["code"] for line in expired} == {"batch_expired"}
    assert done.output_file_id is not None
    assert len(jsonl(client.files.content(done.output_file_id).text)) == done.request_counts.completed


def test_an_upload_past_200_mb_is_refused_and_leaves_nothing(batch_gateway: Gateway, files_dir: Path) -> None:
    client = batch_gateway.client(batch_gateway.new_key()["key"])

    class Big(io.RawIOBase):
        """201 MB of lines, made as it is read: never held whole by the test either."""

        left = 201 * 1000 * 1000

        def readable(self) -> bool:
            return True

        def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
            size = min(len(buffer), self.left)
            buffer[:size] = b"x" * size
            self.left -= size
            return size

    with pytest.raises(openai.APIStatusError) as caught:
        client.files.create(file=("big.jsonl", io.BufferedReader(Big())), purpose="batch")
    assert caught.value.status_code == 413
    assert list(client.files.list()) == []
    assert not [p for p in files_dir.rglob("*") if p.is_file()]


def test_batch_tokens_are_priced_with_the_models_batch_multiplier(
    make_gateway: GatewayFactory, fake_worker: str, files_dir: Path
) -> None:
    price = Price(Decimal("1"), Decimal("2"), batch_multiplier=Decimal("0.5"))
    table = ModelTable((ModelConfig(name=FAKE_MODEL, endpoints=(fake_worker,), price=price),))
    with make_gateway(table, files_url=f"file://{files_dir}", batch_poll_interval_s=0.05) as gw:
        key = gw.new_key()
        client = gw.client(key["key"])
        client.chat.completions.create(model=FAKE_MODEL, messages=[{"role": "user", "content": "hello 0"}])
        done = wait_for_batch(client, _batch(client, 1))
        assert done.status == "completed"
        wait_until(lambda: len(gw.usage(key["team"])) == 2, 10, "both requests metered")
        rows = {row["api"]: row for row in gw.usage(key["team"])}
        assert rows["batch"]["prompt_tokens"] == rows["chat"]["prompt_tokens"]
        assert rows["batch"]["completion_tokens"] == rows["chat"]["completion_tokens"]
        assert Decimal(rows["batch"]["cost"]) * 2 == Decimal(rows["chat"]["cost"])


def test_batch_lines_go_behind_interactive_requests_in_a_priority_engine(
    make_gateway: GatewayFactory, fake_worker: str, files_dir: Path
) -> None:
    table = ModelTable((ModelConfig(name=FAKE_MODEL, endpoints=(fake_worker,), engine_priority=True),))
    with make_gateway(table, files_url=f"file://{files_dir}", batch_poll_interval_s=0.05) as gw:
        client = gw.client(gw.new_key()["key"])
        interactive = client.chat.completions.with_raw_response.create(
            model=FAKE_MODEL, messages=[{"role": "user", "content": "hi"}]
        )
        record = worker_record(fake_worker, interactive.headers["x-request-id"])
        assert record is not None
        assert "priority" not in record["body"]
        # A line's own `priority` is the gateway's to set, not the client's.
        done = wait_for_batch(client, _batch(client, 1, priority=-5))
        assert done.output_file_id is not None
        line = jsonl(client.files.content(done.output_file_id).text)[0]
        record = worker_record(fake_worker, line["response"]["request_id"])
        assert record is not None
        assert record["body"]["priority"] == BATCH_PRIORITY


class PeakConcurrency:
    """The worker's requests in flight, and the most there ever were (a counter, not a clock)."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.now = 0
        self.peak = 0

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["path"] != "/v1/chat/completions":
            await self.app(scope, receive, send)
            return
        self.now += 1
        self.peak = max(self.peak, self.now)
        try:
            await self.app(scope, receive, send)
        finally:
            self.now -= 1


def test_lines_started_at_once_count_against_the_share_beside_interactive_requests(
    make_gateway: GatewayFactory, files_dir: Path
) -> None:
    # 4 slots, batch_share 0.5: with one interactive request in flight one line may run, not two
    # (lines started in one look count as in flight before they hold their slot).
    worker = PeakConcurrency(
        DefaultHeaders(create_fake_worker([FAKE_MODEL]), {"x-fake-first-token-delay-ms": "100"})
    )
    with (
        run_uvicorn(worker) as url,
        # A long poll: the engine looks again only when a line ends (or a step does).
        make_gateway(_table(url), files_url=f"file://{files_dir}", batch_poll_interval_s=30.0) as gw,
    ):
        client = gw.client(gw.new_key()["key"])

        def interactive() -> str:
            answer = client.chat.completions.create(
                model=FAKE_MODEL,
                messages=[{"role": "user", "content": "hi"}],
                extra_headers={"x-fake-first-token-delay-ms": "2000"},
            )
            return answer.choices[0].message.content or ""

        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            held = pool.submit(interactive)
            wait_until(lambda: worker.now == 1, 30, "the interactive request reached the worker")
            done = wait_for_batch(client, _batch(client, 6))
            assert held.result()
    assert done.status == "completed"
    assert done.request_counts is not None
    assert done.request_counts.completed == 6
    # The interactive request and at most one line at once while it ran; two lines once it ended.
    assert worker.peak == 2
