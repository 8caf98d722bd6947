"""Per team, key, model, client API and UTC day usage in Redis: one script call per finished
request.

    sg:{t:<team>}:usage:<YYYY-MM-DD>   HASH  "<key_id>|<model>|<api>|<counter>" -> integer
    sg:{t:<team>}:usage-days           SET   days that have usage
    sg:{t:<team>}:req:<request_id>     STR   marker that makes a retried write count once
    sg:{t:<team>}:last-used            HASH  key id -> Unix seconds of its last finished request

Counters: requests, prompt_tokens, completion_tokens, errors, disconnects, and cost_nano (what
the requests cost at the prices in force when they ran, gateway/pricing.py). The api (`chat`,
`completions`, `embeddings`, `messages`, `responses`) is a field of the same hash, so the keys did
not change when it came: fields written before it, `"<key_id>|<model>|<counter>"`, are read as
usage with no api (`null` in a report) and stay until the day's hash expires. Since costs are
recorded, a field also names the price version the requests were priced at,
`"<key_id>|<model>|<api>|<price_version>|<counter>"`: usage at two prices is two rows, each keeping
its own cost; fields without one are usage recorded before costs were (`price_version` null, which
the report prices as today). Usage an overflow provider served adds who served it,
`"<key_id>|<model>|<api>|<price_version>|overflow:<provider>|<counter>"` (gateway/overflow/). Key
ids, model names, api names, price versions and provider names never hold a `|`, so the number of
parts tells the layouts apart.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import time
from collections import defaultdict, deque

from redis.exceptions import RedisError

from gateway.metering.record import UsageRecord
from gateway.metering.spool import Spool
from gateway.observability.metrics import Metrics
from gateway.redis import keys as redis_keys
from gateway.redis.client import RedisClient
from gateway.redis.scripts import load_script

log = logging.getLogger("sluicegate.metering")

_MARKER_TTL_S = 24 * 3600
_USAGE_TTL_S = 400 * 24 * 3600
COUNTERS = ("requests", "prompt_tokens", "completion_tokens", "errors", "disconnects", "cost_nano")
# How long a written batch is kept, to be written again if a later write fails: what a primary
# acknowledged just before it died may never have reached the replica that replaces it (Redis
# replicates asynchronously; Sentinel or Cluster failover). settle.lua counts a request id once,
# so where the write did land, writing it again changes nothing.
_REWRITE_WINDOW_S = 5.0


def _keys(usage: UsageRecord) -> list[str]:
    keys = [
        redis_keys.request_marker(usage.team, usage.request_id),
        redis_keys.usage_day(usage.team, usage.day),
        redis_keys.usage_days(usage.team),
        redis_keys.admission_marker(usage.team, usage.request_id),
        redis_keys.key_last_used(usage.team),
    ]
    keys.extend([key for key, _, _ in usage.settlements])  # one call, not a resumption per key
    return keys


def _costed(usage: UsageRecord) -> bool:
    """Written with its cost: every record since costs are recorded (all of them have an api)."""
    return bool(usage.api and usage.price_version)


def _field_prefix(usage: UsageRecord) -> str:
    # A record spooled before the api (or its cost) existed has none: it is written in the layout
    # it came from.
    if _costed(usage):
        if usage.served_by:  # an overflow provider's usage: rows of their own
            return f"{usage.key_id}|{usage.model}|{usage.api}|{usage.price_version}|{usage.served_by}"
        return f"{usage.key_id}|{usage.model}|{usage.api}|{usage.price_version}"
    if usage.api:
        return f"{usage.key_id}|{usage.model}|{usage.api}"
    return f"{usage.key_id}|{usage.model}"


def _args(usage: UsageRecord) -> list[str | int]:
    return [
        _MARKER_TTL_S,
        _USAGE_TTL_S,
        usage.day,
        _field_prefix(usage),
        usage.prompt_tokens,
        usage.completion_tokens,
        int(usage.error),
        int(usage.disconnected),
        int(usage.void),
        # One string, not two arguments per limit: the client formats each argument on its own.
        "".join([f"{kind} {argument} " for _, kind, argument in usage.settlements]),
        usage.cost_nano if _costed(usage) else 0,
    ]


class Meter:
    """Usage writes leave the request path: a finished request submits its record and returns at
    once; one flusher task writes everything pending in a single pipelined round trip, so under
    load many requests share one. Records that cannot be written stay queued (bounded, oldest
    dropped first and counted) and are retried; every write is idempotent per request id."""

    def __init__(
        self,
        redis: RedisClient,
        metrics: Metrics,
        *,
        timeout_s: float,
        max_pending: int = 100_000,
        max_batch: int = 512,
    ) -> None:
        self._redis = redis
        self._script = load_script(redis, "settle")
        self._metrics = metrics
        self._timeout_s = timeout_s
        self._max_pending = max_pending
        self._max_batch = max_batch
        self._pending: deque[UsageRecord] = deque()
        self._written: deque[tuple[float, list[UsageRecord]]] = deque()  # (when, batch), recent
        self._rewrite: deque[UsageRecord] = deque()  # written, to be written again after a failure
        self._wakeup = asyncio.Event()
        self._flush_lock = asyncio.Lock()
        self._flusher: asyncio.Task[None] | None = None

    def submit(self, usage: UsageRecord) -> None:
        if len(self._pending) >= self._max_pending:
            self._pending.popleft()
            self._metrics.metering_dropped.inc()
        self._pending.append(usage)
        self._metrics.metering_pending.set(len(self._pending))
        self._wakeup.set()

    def start(self, spool: Spool | None = None) -> None:
        """With a spool, what the last run could not write is queued again first."""
        self._flusher = asyncio.ensure_future(self._run())
        if spool is not None:
            spool.start_replay(self)

    async def stop(self, spool: Spool | None = None) -> None:
        # Cancelled mid-write, a flush would lose the batch in its hands (a paused Redis holds it
        # for the whole timeout): with the lock held, the tasks that flush stop between writes.
        async with self._flush_lock:
            if self._flusher is not None:
                self._flusher.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._flusher
            if spool is not None:
                await spool.stop_replay()
        await self.flush()
        if spool is not None:
            spool.keep(self._pending)
        elif self._pending:
            log.error("usage records not written at shutdown: %d", len(self._pending))

    async def _run(self) -> None:
        backoff = 0.05
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            if await self.flush():
                backoff = 0.05
            else:
                await asyncio.sleep(backoff)  # Redis is down: retry, but do not spin
                backoff = min(backoff * 2, 2.0)
                self._wakeup.set()

    async def flush(self) -> bool:
        """Writes everything pending; False if Redis could not take it (the records stay)."""
        async with self._flush_lock:
            while self._rewrite or self._pending:
                # Writes to repeat first: older than anything pending.
                queue = self._rewrite or self._pending
                batch = [queue.popleft() for _ in range(min(self._max_batch, len(queue)))]
                try:
                    async with asyncio.timeout(self._timeout_s):
                        await self._write(batch)
                    self._keep_written(batch)
                except asyncio.CancelledError:
                    # Cancelled mid-write (shutdown, or a report's caller gave up): keep the batch;
                    # writes are idempotent, so one that did land is not counted twice.
                    queue.extendleft(reversed(batch))
                    raise
                except (RedisError, TimeoutError) as exc:
                    queue.extendleft(reversed(batch))
                    self._repeat_written()
                    self._metrics.metering_failures.inc()
                    self._metrics.metering_pending.set(len(self._pending))
                    log.warning("usage write failed, %d pending: %s", len(self._pending), type(exc).__name__)
                    return False
            self._metrics.metering_pending.set(0)
            return True

    def _keep_written(self, batch: list[UsageRecord]) -> None:
        now = time.monotonic()
        self._written.append((now, batch))
        while self._written[0][0] < now - _REWRITE_WINDOW_S:
            self._written.popleft()

    def _repeat_written(self) -> None:
        """After a failed write, what was written just before it is written again (see
        _REWRITE_WINDOW_S). Not pending: not in the gauge, and not spooled at shutdown (it most
        likely landed; the spool is for what surely did not)."""
        for _, written in reversed(self._written):  # oldest first
            self._rewrite.extendleft(reversed(written))
        self._written.clear()
        while len(self._rewrite) > self._max_pending:
            self._rewrite.popleft()  # the oldest: a failover loses the last writes before it

    async def _write(self, batch: list[UsageRecord]) -> None:
        """One pipelined round trip of EVALSHA (`Script.run_batch`: no SCRIPT EXISTS first, the whole
        batch again after NOSCRIPT): settle.lua counts each request id once, so the records that
        did land are not counted twice. One record (every batch when requests come
        one at a time) goes as a plain EVALSHA: a pipeline's own machinery costs more than it."""
        if len(batch) == 1:
            await self.record(batch[0])  # reloads the script on NOSCRIPT itself
            return
        await self._script.run_batch([(_keys(usage), _args(usage)) for usage in batch])

    async def record(self, usage: UsageRecord) -> bool:
        """Writes one record now: True when written, False when its request id was already."""
        return bool(await self._script(keys=_keys(usage), args=_args(usage)))

    async def report(
        self, teams: list[str], since: dt.date | None, until: dt.date | None
    ) -> list[dict[str, object]]:
        """Rows per team, key, model, api and day, oldest first; since/until are inclusive. This
        replica's pending writes go first, so its own answers are always in the report."""
        await self.flush()
        if not teams:
            return []
        # Two round trips for every team at once, not two per team: each is a pipeline of
        # one-key reads, which a cluster client splits per node and sends in parallel.
        async with self._redis.pipeline(transaction=False) as pipe:
            for team in teams:
                pipe.smembers(redis_keys.usage_days(team))
            day_sets = await pipe.execute()
        wanted = [
            (team, day)
            for team, members in zip(teams, day_sets, strict=True)
            for day in sorted(redis_keys.as_text(d) for d in members)
            if (since is None or day >= since.isoformat()) and (until is None or day <= until.isoformat())
        ]
        if not wanted:
            return []
        async with self._redis.pipeline(transaction=False) as pipe:
            for team, day in wanted:
                pipe.hgetall(redis_keys.usage_day(team, day))
            hashes = await pipe.execute()
        rows: list[dict[str, object]] = []
        for (team, day), raw in zip(wanted, hashes, strict=True):
            rows.extend(_rows_of_day(team, day, raw))
        return rows


def _rows_of_day(team: str, day: str, raw: dict[bytes, bytes]) -> list[dict[str, object]]:
    grouped: dict[tuple[str, str, str, str, str], dict[str, int]] = defaultdict(dict)
    for field, value in raw.items():
        key_id, model, *rest = field.decode().split("|")
        api = rest[0] if len(rest) >= 2 else ""  # old layout: "<key_id>|<model>|<counter>"
        version = rest[1] if len(rest) >= 3 else ""  # recorded before costs were: none
        served_by = rest[2] if len(rest) == 4 else ""  # an overflow provider's (gateway/overflow/)
        grouped[(key_id, model, api, version, served_by)][rest[-1]] = int(value)
    rows: list[dict[str, object]] = []
    for (key_id, model, api_name, version, served_by), counters in sorted(grouped.items()):
        row: dict[str, object] = {"team": team, "key_id": key_id, "model": model, "day": day}
        for name in COUNTERS:
            row[name] = counters.get(name, 0)
        row["total_tokens"] = counters.get("prompt_tokens", 0) + counters.get("completion_tokens", 0)
        # Last, so CSV readers that go by column position still read what they did before; null
        # (an empty CSV cell) for usage written before it was recorded.
        row["api"] = api_name or None
        row["price_version"] = version or None
        row["served_by"] = served_by or None
        rows.append(row)
    return rows
