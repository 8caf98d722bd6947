"""Usage pending when a gateway stops with Redis down is spooled to a file, and the next start
writes it and only then removes the file."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import os
import secrets
import signal
from pathlib import Path

import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam
from redis.asyncio import Redis

from gateway.dev.embedded_redis import EmbeddedRedis
from gateway.metering.meter import Meter
from gateway.metering.record import UsageRecord
from gateway.metering.spool import Spool
from gateway.metering.usage_store import UsageStore
from gateway.observability.metrics import Metrics
from tests.conftest import FAKE_MODEL
from tests.faults.conftest import StartGateway
from tests.waiting import wait_until

HELLO: list[ChatCompletionMessageParam] = [{"role": "user", "content": "hello spool"}]
UNREACHABLE = "redis://127.0.0.1:1/0"


def test_usage_pending_at_shutdown_survives_in_the_spool(
    start_gateway: StartGateway, own_redis: EmbeddedRedis, tmp_path: Path
) -> None:
    spool = tmp_path / "usage.spool"
    first = start_gateway(own_redis.url)
    team = "spool-" + secrets.token_hex(4)
    first.admin.call("POST", "/admin/v1/teams", {"name": team})
    key = first.new_key(team)
    served = [0, 0, 0]  # requests, prompt tokens, completion tokens, as the clients saw them

    def ask(url: str, tokens: int) -> None:
        with openai.OpenAI(base_url=f"{url}/v1", api_key=key["key"], max_retries=0, timeout=10) as sdk:
            reply = sdk.chat.completions.create(
                model=FAKE_MODEL,
                messages=HELLO,
                extra_headers={"x-fake-tokens": str(tokens)},
            )
        assert reply.usage is not None
        served[0] += 1
        served[1] += reply.usage.prompt_tokens
        served[2] += reply.usage.completion_tokens

    ask(first.url, 3)  # caches the key, and its usage is written while Redis is up
    wait_until(lambda: first.metric("sluicegate_metering_pending") == 0, 10, "the first write")
    # Paused rather than killed: the meter's write hangs for its whole timeout, the moment a
    # shutdown must not drop the batch in flight.
    os.kill(own_redis.pid, signal.SIGSTOP)
    for tokens in (1, 2, 4, 8, 16):
        ask(first.url, tokens)
    wait_until(lambda: first.metric("sluicegate_metering_pending") == 5, 10, "5 pending writes")
    first.stop()
    lines = spool.read_text().splitlines()
    assert len(lines) == 5, first.log()
    assert sorted(json.loads(line)["completion_tokens"] for line in lines) == [1, 2, 4, 8, 16]
    os.kill(own_redis.pid, signal.SIGKILL)  # it never ran the writes it was sent while paused
    own_redis.stop()

    # The next replica starts while Redis is still down: the file stays until its records land.
    second = start_gateway(own_redis.url)
    wait_until(lambda: second.metric("sluicegate_metering_failures_total") >= 1, 10, "a failed replay")
    assert spool.exists()
    own_redis.start()
    wait_until(lambda: not spool.exists(), 15, "the spool to be replayed and removed")
    (row,) = second.usage(team)
    assert (row["requests"], row["prompt_tokens"], row["completion_tokens"]) == tuple(served)
    second.stop()
    assert not spool.exists(), "nothing was pending, yet a spool was written"


def _record(n: int, team: str, settlements: tuple[tuple[str, str, str], ...] = ()) -> UsageRecord:
    return UsageRecord(
        request_id=f"spool-{n}-{secrets.token_hex(4)}",
        team=team,
        key_id="key_1",
        model="m",
        prompt_tokens=n,
        completion_tokens=2 * n,
        error=False,
        disconnected=False,
        day=UsageRecord.today(),
        settlements=settlements,
    )


def test_corrupt_lines_are_skipped_and_counted(
    redis_server: EmbeddedRedis, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "usage.spool"
    team = "spool-" + secrets.token_hex(4)
    Spool(path).keep([_record(1, team), _record(2, team)])
    older = dataclasses.asdict(_record(3, team))
    del older["settlements"]  # written before the field existed: its default applies
    with path.open("ab") as f:
        f.write(json.dumps(older).encode() + b"\n")
        f.write(b"{not json\n")
        f.write(json.dumps({"request_id": "x"}).encode() + b"\n")  # the wrong shape
        f.write(b'{"request_id": "half a line')  # what a crash mid-write leaves

    async def start_then_report() -> list[dict[str, object]]:
        redis = Redis.from_url(redis_server.url)
        meter = Meter(UsageStore(redis, timeout_s=2), Metrics())
        spool = Spool(path)
        meter.start(spool)
        try:
            for _ in range(100):
                if not path.exists():
                    break
                await asyncio.sleep(0.05)
            return await meter.report([team], None, None)
        finally:
            await meter.stop(spool)
            await redis.aclose()

    with caplog.at_level(logging.INFO, logger="sluicegate.spool"):
        rows = asyncio.run(start_then_report())
    assert not path.exists()
    assert "skipped 3 corrupt line(s)" in caplog.text
    assert [(r["requests"], r["prompt_tokens"], r["completion_tokens"]) for r in rows] == [(3, 6, 12)]


def test_a_restart_that_cannot_reach_redis_keeps_the_spool_without_copying_it(tmp_path: Path) -> None:
    path = tmp_path / "usage.spool"
    kept = [
        _record(1, "spool-unit", (("sg:{t:spool-unit}:rl:key:k1:conc", "c", "req-1"),)),
        _record(2, "spool-unit"),
    ]
    Spool(path).keep(kept)

    async def restart_without_redis(extra: UsageRecord | None) -> None:
        redis = Redis.from_url(UNREACHABLE)
        meter = Meter(UsageStore(redis, timeout_s=0.5), Metrics())
        spool = Spool(path)
        meter.start(spool)
        if extra is not None:
            meter.submit(extra)
        await asyncio.sleep(0.1)
        await meter.stop(spool)
        await redis.aclose()

    new = _record(3, "spool-unit")
    asyncio.run(restart_without_redis(None))
    asyncio.run(restart_without_redis(new))
    back = Spool(path).load()
    assert sorted(back, key=lambda r: r.prompt_tokens) == [*kept, new]
