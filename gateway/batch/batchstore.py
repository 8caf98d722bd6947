"""The Redis side of batches: records, the team's index, the engines' list of active batches, and
each batch's lines (queue, leases, answers) moved only by the batch_*.lua scripts, so that every
line is answered exactly once whichever replicas run, die or restart (docs/batch.md).

    sg:batches:active                 SET   "<team>/<batch id>" of batches not yet final
    sg:{t:<team>}:batches             ZSET  batch id -> created_at (ms), pruned as files' index is
    sg:{t:<team>}:batch:<id>          HASH  spec (JSON), status, total, completed, failed, <x>_at,
                                            model, output_file_id, error_file_id, errors, usage.*
    sg:{t:<team>}:batch:<id>:pending|leases|owners|results|tries   (gateway.redis.keys.batch_lines)
    sg:{t:<team>}:batch-running       ZSET  the team's running lines (batch_max_inflight)
    sg:{t:<team>}:batch-queued        STR   the team's lines not yet answered (max_batch_lines)
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

import orjson

from gateway.batch.filestore import prune_index
from gateway.batch.records import Batch
from gateway.batch.validation import SPAN_SIZE, span_of
from gateway.redis import keys
from gateway.redis.client import RedisClient
from gateway.redis.keys import EncodableT
from gateway.redis.scripts import load_script
from gateway.redis.store import FAILURES, RedisStore

CLAIMED, NOTHING, TEAM_FULL, NOT_RUNNING = 1, 0, -1, -2


class BatchStore(RedisStore):
    def __init__(self, redis: RedisClient, *, retention_s: float) -> None:
        super().__init__(redis)
        self._retention_s = retention_s  # no record outlives its creation by more
        self._start = load_script(redis, "batch_start")
        self._claim = load_script(redis, "batch_claim")
        self._renew = load_script(redis, "batch_renew")
        self._done = load_script(redis, "batch_done")
        self._release = load_script(redis, "batch_release")
        self._stop = load_script(redis, "batch_stop")
        self._finalizing = load_script(redis, "batch_finalizing")
        self._fail = load_script(redis, "batch_fail")

    # -- records ------------------------------------------------------------------------------

    async def create(self, batch: Batch) -> None:
        record = keys.batch_record(batch.team, batch.id)
        index = keys.batches_index(batch.team)
        now_ms = time.time() * 1000
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.hset(record, mapping={"spec": batch.spec_json(), "status": "validating", "total": 0})
            pipe.expireat(record, batch.retain_until)
            pipe.zadd(index, {batch.id: now_ms})  # ms: order within a second
            prune_index(pipe, index, now_ms, self._retention_s)
            pipe.sadd(keys.BATCHES_ACTIVE, f"{batch.team}/{batch.id}")
            await pipe.execute()

    async def get(self, team: str, batch_id: str, team_id: str | None = None) -> Batch | None:
        """None for no such batch, an expired one, and (with `team_id`) another team's."""
        raw: dict[bytes, bytes] = await self.redis.hgetall(keys.batch_record(team, batch_id))  # type: ignore[assignment]
        if not raw or b"spec" not in raw:
            return None
        batch = Batch.from_hash(raw)
        if team_id is not None and batch.team_id != team_id:
            return None
        if batch.retain_until <= time.time():
            return None
        return batch

    async def page(
        self, team: str, team_id: str, *, after: str | None, limit: int
    ) -> tuple[list[Batch], bool]:
        index = keys.batches_index(team)
        start = 0
        if after is not None:
            rank: Any = await self.redis.zrevrank(index, after)
            if rank is None:
                return [], False
            start = rank + 1
        out: list[Batch] = []
        while len(out) <= limit:
            ids: Any = await self.redis.zrange(index, start, start + limit, desc=True)
            if not ids:
                break
            start += len(ids)
            gone = []
            for raw_id in ids:
                batch = await self.get(team, keys.as_text(raw_id))
                if batch is None:
                    gone.append(raw_id)
                elif batch.team_id == team_id:
                    out.append(batch)
            if gone:
                await self.redis.zrem(index, *gone)
                start -= len(gone)
        return out[:limit], len(out) > limit

    async def active(self) -> list[tuple[str, str]]:
        members = await self.redis.smembers(keys.BATCHES_ACTIVE)
        out = []
        for member in members:
            team, _, batch_id = keys.as_text(member).partition("/")
            out.append((team, batch_id))
        return sorted(out)

    async def forget_active(self, team: str, batch_id: str) -> None:
        await self.redis.srem(keys.BATCHES_ACTIVE, f"{team}/{batch_id}")

    async def lock(self, team: str, batch_id: str, what: str, ttl_s: float) -> bool:
        """A short claim on one step of a batch (its validation, its finalize) for this replica;
        a replica that dies lets it go when the TTL ends, and another takes the step up."""
        name = f"{keys.batch_record(team, batch_id)}:{what}"
        return bool(await self.redis.set(name, b"1", nx=True, px=int(ttl_s * 1000)))

    async def unlock(self, team: str, batch_id: str, what: str) -> None:
        await self.redis.delete(f"{keys.batch_record(team, batch_id)}:{what}")

    async def queued(self, team: str) -> int:
        return int(await self.redis.get(keys.batch_queued(team)) or 0)

    async def pending(self, team: str, batch_id: str) -> int:
        """A batch's lines waiting to start."""
        return int(await self.redis.llen(keys.batch_lines(team, batch_id)[0]))

    async def running(self, team: str) -> int:
        name = keys.batch_running(team)
        return int(await self.redis.zcount(name, time.time() * 1000, "+inf"))

    # -- validation -----------------------------------------------------------------------------

    async def put_index(self, batch: Batch, index: bytes) -> None:
        """Each line's byte span in the input file (gateway.batch.validation), read one line at a
        time by the engines."""
        await self.redis.set(_index(batch.team, batch.id), index, exat=batch.retain_until)

    async def span(self, team: str, batch_id: str, line: int) -> tuple[int, int]:
        raw: bytes = await self.redis.getrange(  # type: ignore[assignment]
            _index(team, batch_id), line * SPAN_SIZE, (line + 1) * SPAN_SIZE - 1
        )
        if len(raw) != SPAN_SIZE:
            raise FileNotFoundError(f"{batch_id} line {line}")
        return span_of(raw)

    async def start(self, batch: Batch, total: int, max_lines: int | None) -> int:
        pending = keys.batch_lines(batch.team, batch.id)[0]
        return int(
            await self._start(
                keys=[keys.batch_record(batch.team, batch.id), keys.batch_queued(batch.team), pending],
                args=[total, max_lines or 0, batch.model, int(time.time()), batch.retain_until],
            )
        )

    async def fail(self, batch: Batch, errors: Sequence[dict[str, Any]]) -> None:
        """The batch failed its validation, unless a cancel came first (that batch ends cancelled)."""
        failed = await self._fail(
            keys=[keys.batch_record(batch.team, batch.id)],
            args=[int(time.time()), orjson.dumps(list(errors))],
        )
        if failed:
            await self.redis.srem(keys.BATCHES_ACTIVE, f"{batch.team}/{batch.id}")

    # -- lines ----------------------------------------------------------------------------------

    async def claim(
        self, batch: Batch, token: str, *, lease_s: float, max_inflight: int | None
    ) -> tuple[int, int]:
        """(CLAIMED, line), or (NOTHING | TEAM_FULL | NOT_RUNNING, -1)."""
        pending, leases, owners, results, _ = keys.batch_lines(batch.team, batch.id)
        reply = await self._claim(
            keys=[
                keys.batch_record(batch.team, batch.id),
                pending,
                leases,
                owners,
                results,
                keys.batch_running(batch.team),
                keys.batch_queued(batch.team),
            ],
            args=[
                int(time.time() * 1000),
                int(lease_s * 1000),
                token,
                max_inflight or 0,
                batch.id,
                batch.retain_until,
            ],
        )
        code = int(reply[0])
        return code, int(reply[1]) if code == CLAIMED else -1

    async def renew(self, team: str, batch_id: str, token: str, lines: Sequence[int], lease_s: float) -> int:
        _, leases, owners, _, _ = keys.batch_lines(team, batch_id)
        until = int((time.time() + lease_s) * 1000)
        return int(
            await self._renew(
                keys=[leases, owners, keys.batch_running(team)], args=[until, token, batch_id, *lines]
            )
        )

    async def done(
        self,
        batch: Batch,
        line: int,
        token: str,
        *,
        ok: bool,
        value: bytes,
        input_tokens: int,
        output_tokens: int,
    ) -> bool:
        """Writes the line's answer and releases its lease in one step; False when this replica's
        lease was lost (another replica runs the line; this answer is dropped)."""
        _, leases, owners, results, _ = keys.batch_lines(batch.team, batch.id)
        written = await self._done(
            keys=[
                keys.batch_record(batch.team, batch.id),
                leases,
                owners,
                results,
                keys.batch_running(batch.team),
                keys.batch_queued(batch.team),
            ],
            args=[
                line,
                token,
                "completed" if ok else "failed",
                value,
                batch.id,
                input_tokens,
                output_tokens,
                batch.retain_until,
            ],
        )
        return bool(written)

    async def release(
        self, team: str, batch_id: str, line: int, token: str, *, retry: bool, tries: int = 1
    ) -> int:
        """Gives a claimed line back: 1 done, 0 the lease was lost, -1 (retry) no try left."""
        pending, leases, owners, _, tries_key = keys.batch_lines(team, batch_id)
        return int(
            await self._release(
                keys=[
                    leases,
                    owners,
                    keys.batch_running(team),
                    pending,
                    tries_key,
                    keys.batch_record(team, batch_id),
                    keys.batch_queued(team),
                ],
                args=[line, token, batch_id, 1 if retry else 0, tries],
            )
        )

    async def stop(self, team: str, batch_id: str, how: str) -> str:
        """`how`: 'cancelling' or 'expiring'. Returns the status the batch had ('' for none)."""
        pending = keys.batch_lines(team, batch_id)[0]
        return keys.as_text(
            await self._stop(
                keys=[keys.batch_record(team, batch_id), pending, keys.batch_queued(team)],
                args=[how, int(time.time())],
            )
        )

    async def finalizing(self, team: str, batch_id: str) -> str:
        """What the batch ends as once its output is written, or '' while lines remain."""
        pending, leases, owners, results, _ = keys.batch_lines(team, batch_id)
        now = time.time()
        return keys.as_text(
            await self._finalizing(
                keys=[
                    keys.batch_record(team, batch_id),
                    pending,
                    leases,
                    owners,
                    keys.batch_running(team),
                    keys.batch_queued(team),
                    results,
                ],
                args=[int(now), int(now * 1000), batch_id],
            )
        )

    async def results(self, team: str, batch_id: str) -> AsyncIterator[tuple[int, bytes]]:
        results = keys.batch_lines(team, batch_id)[3]
        cursor = 0
        while True:
            try:  # a generator: the store's mapping of Redis failures is not around it, so here
                page: Any = await self.redis.hscan(results, cursor, count=500)
            except FAILURES as exc:
                raise self.unavailable("BatchStore.results", exc, None) from None
            cursor, found = page
            for line, value in found.items():
                yield int(line), value
            if cursor == 0:
                return

    async def finish(
        self,
        batch: Batch,
        status: str,
        output_file_id: str | None,
        error_file_id: str | None,
        *,
        never_ran: int = 0,
    ) -> None:
        """The batch's final status and files; `never_ran`: lines the window's end stopped, which
        the error file names (counted failed, as OpenAI counts them)."""
        record = keys.batch_record(batch.team, batch.id)
        fields: dict[EncodableT, EncodableT] = {"status": status, f"{status}_at": int(time.time())}
        if never_ran:
            fields["failed"] = batch.failed + never_ran
        if output_file_id is not None:
            fields["output_file_id"] = output_file_id
        if error_file_id is not None:
            fields["error_file_id"] = error_file_id
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.hset(record, mapping=fields)
            pipe.delete(*keys.batch_lines(batch.team, batch.id), _index(batch.team, batch.id))
            pipe.srem(keys.BATCHES_ACTIVE, f"{batch.team}/{batch.id}")
            await pipe.execute()


def _index(team: str, batch_id: str) -> str:
    return keys.batch_record(team, batch_id) + ":index"
