"""A usage spool someone else planted: replayed at start, it would change budgets (a record's
settlements give tokens back). The spool's default home is the gateway user's own state
directory, created private; a file is replayed only if the gateway's user owns it, nobody else
may write it, it is not a link, and each record settles only its own team's limits.

Real Redis, the real Meter and Spool; files made as an attacker would make them."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import secrets
import stat
import tempfile
from pathlib import Path

import pytest
from redis.asyncio import Redis

from gateway.config import Settings, default_spool_path
from gateway.dev.embedded_redis import EmbeddedRedis
from gateway.metering.meter import Meter
from gateway.metering.record import UsageRecord
from gateway.metering.spool import Spool
from gateway.metering.usage_store import UsageStore
from gateway.observability.metrics import Metrics
from gateway.redis import keys as redis_keys

NOBODY = 65534


def _record(team: str, settlements: tuple[tuple[str, str, str], ...] = ()) -> UsageRecord:
    return UsageRecord(
        request_id=f"planted-{secrets.token_hex(4)}",
        team=team,
        key_id="key_1",
        model="m",
        prompt_tokens=1,
        completion_tokens=2,
        error=False,
        disconnected=False,
        day=UsageRecord.today(),
        settlements=settlements,
    )


def _plant(path: Path, records: list[UsageRecord]) -> None:
    path.write_bytes(b"".join(json.dumps(dataclasses.asdict(r)).encode() + b"\n" for r in records))


def _start(redis_url: str, path: Path, team: str) -> list[dict[str, object]]:
    """A gateway's meter starting with `path` as its spool: the usage rows `team` then has."""

    async def main() -> list[dict[str, object]]:
        redis = Redis.from_url(redis_url)
        meter = Meter(UsageStore(redis, timeout_s=2), Metrics())
        spool = Spool(path)
        meter.start(spool)
        try:
            await meter.flush()
            return await meter.report([team], None, None)
        finally:
            await meter.stop(spool)
            await redis.aclose()

    return asyncio.run(main())


def test_the_default_spool_is_in_the_users_own_state_directory_not_the_temp_dir(tmp_path: Path) -> None:
    assert not Settings().spool_path.startswith(tempfile.gettempdir() + os.sep)
    state = tmp_path / "state"
    assert default_spool_path({"XDG_STATE_HOME": str(state)}) == str(state / "sluicegate" / "usage.spool")
    assert Settings.from_env({"XDG_STATE_HOME": str(state)}).spool_path == str(
        state / "sluicegate" / "usage.spool"
    )


def test_a_missing_spool_directory_is_created_private(redis_server: EmbeddedRedis, tmp_path: Path) -> None:
    path = tmp_path / "state" / "sluicegate" / "usage.spool"
    _start(redis_server.url, path, "nobody-here")
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert path.parent.stat().st_uid == os.geteuid()


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
def test_a_spool_owned_by_another_user_is_not_replayed(redis_server: EmbeddedRedis, tmp_path: Path) -> None:
    team = "planted-" + secrets.token_hex(4)
    path = tmp_path / "usage.spool"
    _plant(path, [_record(team)])
    os.chown(path, NOBODY, NOBODY)
    os.chmod(path, 0o600)
    assert _start(redis_server.url, path, team) == []
    assert path.exists()  # left for whoever looks into it


def test_a_spool_others_may_write_or_a_link_is_not_replayed(
    redis_server: EmbeddedRedis, tmp_path: Path
) -> None:
    team = "planted-" + secrets.token_hex(4)
    writable = tmp_path / "usage.spool"
    _plant(writable, [_record(team)])
    os.chmod(writable, 0o666)  # noqa: S103 -- the attacker's file
    assert _start(redis_server.url, writable, team) == []
    # A link to a file the gateway would trust is not followed either.
    target = tmp_path / "elsewhere.spool"
    _plant(target, [_record(team)])
    os.chmod(target, 0o600)
    link = tmp_path / "linked.spool"
    link.symlink_to(target)
    assert _start(redis_server.url, link, team) == []
    # The gateway's own file, for comparison, is replayed.
    assert [row["requests"] for row in _start(redis_server.url, target, team)] == [1]


def test_a_record_that_settles_another_teams_limits_is_not_replayed(
    redis_server: EmbeddedRedis, tmp_path: Path
) -> None:
    team, victim = "planted-" + secrets.token_hex(4), "victim-" + secrets.token_hex(4)
    budget = redis_keys.rate_limit(victim, "budget:d:2099-01-01")
    path = tmp_path / "usage.spool"
    _plant(path, [_record(team, ((budget, "b", "1000000"),)), _record(team, ((redis_keys.TEAMS, "b", "5"),))])
    os.chmod(path, 0o600)
    assert _start(redis_server.url, path, team) == []
