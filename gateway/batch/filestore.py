"""The Redis side of files: each file's record (a string, expiring with the file) and the team's
index of them (a ZSET by creation, pruned of expired records as it is read, and of those older
than the retention on each add: bounded for a team that never lists).

    sg:{t:<team>}:file:<id>   STR   the record (gateway.batch.records.FileRecord), EXPIREAT
    sg:{t:<team>}:files       ZSET  file id -> created_at (ms), EXPIRE retention after the last add
"""

from __future__ import annotations

import time
from typing import Any

from gateway.batch.records import FileRecord
from gateway.redis import keys
from gateway.redis.client import RedisClient
from gateway.redis.store import RedisStore

MAX_PAGE = 100


def prune_index(pipe: Any, index: str, now_ms: float, retention_s: float) -> None:
    """Queues, after an add to a team's index (ZSET by creation, ms), the removal of entries whose
    record has expired by now (created more than the retention ago) and the index's own expiry a
    retention after this add (past every record it names): a team that never lists its files or
    batches, which prunes the rest, keeps an index no larger than one retention's adds."""
    pipe.zremrangebyscore(index, "-inf", now_ms - retention_s * 1000)
    pipe.pexpire(index, int(retention_s * 1000) + 1000)


class FileStore(RedisStore):
    def __init__(self, redis: RedisClient, *, retention_s: float) -> None:
        super().__init__(redis)
        self._retention_s = retention_s  # no record outlives its creation by more

    async def put(self, team: str, record: FileRecord) -> None:
        index = keys.files_index(team)
        now_ms = time.time() * 1000
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.set(keys.file_record(team, record.id), record.to_json(), exat=record.expires_at)
            pipe.zadd(index, {record.id: now_ms})  # ms: order within a second
            prune_index(pipe, index, now_ms, self._retention_s)
            await pipe.execute()

    async def get(self, team: str, team_id: str, file_id: str) -> FileRecord | None:
        """None for no such file, an expired one, and another team's (a team re-created under
        the name is another team: its id differs)."""
        raw = await self.redis.get(keys.file_record(team, file_id))
        if raw is None:
            return None
        record = FileRecord.from_json(raw)
        if record.team_id != team_id or record.expires_at <= time.time():
            return None
        return record

    async def page(
        self,
        team: str,
        team_id: str,
        *,
        after: str | None,
        limit: int,
        descending: bool,
        purpose: str | None,
    ) -> tuple[list[FileRecord], bool]:
        index = keys.files_index(team)
        start = 0
        if after is not None:
            rank: Any = await (self.redis.zrevrank if descending else self.redis.zrank)(index, after)
            if rank is None:
                return [], False
            start = rank + 1
        out: list[FileRecord] = []
        # Expired or filtered records are skipped: a page is read until it is full or the index ends.
        while len(out) <= limit:
            ids: Any = await self.redis.zrange(index, start, start + limit, desc=descending)
            if not ids:
                break
            start += len(ids)
            raws = await self.redis.mget([keys.file_record(team, keys.as_text(i)) for i in ids])
            gone = []
            for file_id, raw in zip(ids, raws, strict=True):
                record = None if raw is None else FileRecord.from_json(raw)
                if record is None or record.expires_at <= time.time():
                    gone.append(file_id)
                elif record.team_id == team_id and (purpose is None or record.purpose == purpose):
                    out.append(record)
            if gone:
                await self.redis.zrem(index, *gone)
                start -= len(gone)
        return out[:limit], len(out) > limit

    async def delete(self, team: str, file_id: str) -> None:
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.delete(keys.file_record(team, file_id))
            pipe.zrem(keys.files_index(team), file_id)
            await pipe.execute()
