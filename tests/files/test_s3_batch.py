"""The Files and Batch API on object storage: the `openai` SDK's whole batch round (upload, create,
poll, read the output and error files, cancel) through a real gateway whose SLUICEGATE_FILES_URL is
an s3:// URL on a real moto_server, and retention taking what a batch left behind, in Redis and in
the bucket together. Ages are moved by the sweep's `now` and read from Redis' EXPIRETIME, never
waited for."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
import redis

from gateway.files.retention import sweep
from gateway.files.s3 import S3Storage
from gateway.observability.metrics import Metrics
from gateway.redis import keys
from tests.batch.conftest import chat_lines, jsonl, upload, wait_for_batch
from tests.conftest import Gateway, GatewayFactory
from tests.files.conftest import S3Place, admin_client

RETENTION_S = 3600


@pytest.fixture
def s3_gateway(make_gateway: GatewayFactory, s3_place: S3Place) -> Iterator[Gateway]:
    with make_gateway(
        files_url=s3_place.url, files_retention_s=float(RETENTION_S), batch_poll_interval_s=0.05
    ) as gw:
        yield gw


def bucket_names(place: S3Place) -> set[str]:
    async def listing() -> set[str]:
        async with admin_client(place.endpoint) as s3:
            pages = s3.get_paginator("list_objects_v2").paginate(Bucket=place.bucket)
            return {item["Key"] async for page in pages for item in page.get("Contents", [])}

    return asyncio.run(listing())


def test_the_sdk_runs_a_batch_on_s3_and_cancels_one(s3_gateway: Gateway, s3_place: S3Place) -> None:
    client = s3_gateway.client(s3_gateway.new_key()["key"])
    content = chat_lines(5)
    uploaded = client.files.create(file=("in.jsonl", content), purpose="batch")
    assert client.files.content(uploaded.id).read() == content
    # The bytes are in the bucket, under the URL's prefix.
    assert any(name.startswith(s3_place.prefix + "/") for name in bucket_names(s3_place))

    batch = client.batches.create(
        input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    done = wait_for_batch(client, batch.id)
    assert done.status == "completed", done
    assert done.request_counts is not None
    assert (done.request_counts.completed, done.request_counts.failed) == (5, 0)
    assert done.output_file_id is not None
    out = jsonl(client.files.content(done.output_file_id).text)
    assert sorted(line["custom_id"] for line in out) == [f"r{i}" for i in range(5)]
    assert all(line["response"]["status_code"] == 200 for line in out)

    many = client.batches.create(
        input_file_id=upload(client, chat_lines(2000)),
        endpoint="/v1/chat/completions",
        completion_window="24h",
    )
    cancelling = client.batches.cancel(many.id)
    assert cancelling.status in ("cancelling", "cancelled")
    stopped = wait_for_batch(client, many.id)
    assert stopped.status == "cancelled", stopped
    assert stopped.request_counts is not None
    assert stopped.request_counts.completed < 2000
    if stopped.output_file_id is not None:
        finished = jsonl(client.files.content(stopped.output_file_id).text)
        assert len(finished) == stopped.request_counts.completed


def expire_times(redis_client: redis.Redis, pattern: str) -> dict[str, int]:
    return {
        (name.decode() if isinstance(name, bytes) else name): int(redis_client.expiretime(name))
        for name in redis_client.scan_iter(match=pattern, count=1000)  # -1: no expiry
    }


def test_retention_takes_a_batchs_records_and_its_objects_together(
    s3_gateway: Gateway, s3_place: S3Place, redis_client: redis.Redis
) -> None:
    team = s3_gateway.new_team()
    # A daily budget that some lines pass and others do not: an output file and an error file.
    client = s3_gateway.client(s3_gateway.new_key(team=team, daily_tokens=60)["key"])
    input_id = upload(client, chat_lines(8, max_tokens=8))
    batch = client.batches.create(
        input_file_id=input_id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    done = wait_for_batch(client, batch.id)
    assert done.status == "completed", done
    assert done.output_file_id is not None
    assert done.error_file_id is not None
    file_ids = (input_id, done.output_file_id, done.error_file_id)
    # This team's objects (a gateway on the session's Redis may also finish another test's batch
    # into this bucket).
    team_dir = next(name for name in bucket_names(s3_place) if name.endswith("/" + input_id)).rsplit("/", 1)[
        0
    ]
    objects = {name for name in bucket_names(s3_place) if name.startswith(team_dir + "/")}
    assert {name.rsplit("/", 1)[1] for name in objects} == set(file_ids)

    # Every Redis key of the batch and of its three files expires, no later than the batch's
    # retention from its creation.
    retain_until = done.created_at + RETENTION_S
    records = expire_times(redis_client, f"*{{t:{team}}}:batch:{batch.id}*")
    assert keys.batch_record(team, batch.id) in records
    for file_id in file_ids:
        records.update(expire_times(redis_client, keys.file_record(team, file_id)))
    assert len(records) >= 4
    assert all(0 < at <= retain_until + 1 for at in records.values()), records

    async def sweeps() -> tuple[int, int, float]:
        metrics = Metrics()
        storage = S3Storage.from_url(s3_place.url)
        try:
            stored = [item async for item in storage.list("")]
            assert {s3_place.prefix + "/" + item.name for item in stored} >= objects
            # Nothing goes before the retention; past it everything goes, and by then every record
            # has expired too.
            early = await sweep(
                storage, min(item.modified_at for item in stored) + RETENTION_S - 1, RETENTION_S, metrics
            )
            late = max(item.modified_at for item in stored) + RETENTION_S + 1
            assert late >= max(records.values())
            gone = await sweep(storage, late, RETENTION_S, metrics)
            expired = metrics.registry.get_sample_value("sluicegate_files_expired_total", {"store": "s3"})
            return early, gone - len(stored), (expired or 0.0) - gone
        finally:
            await storage.close()

    # Nothing early; then every object, each counted once.
    assert asyncio.run(sweeps()) == (0, 0, 0.0)
    assert bucket_names(s3_place) == set()
