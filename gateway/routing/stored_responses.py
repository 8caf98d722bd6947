"""Which endpoint holds a response that a worker stored, and whose it is.

A worker serving the Responses API natively (vLLM) keeps the responses it stored in the memory of
its own process. A later call about one (`previous_response_id`, `GET`/`DELETE /v1/responses/{id}`,
`cancel`, `input_items`) must reach that process, from any gateway replica, and only for the team
that made it: so the first time the gateway sees a response id it writes the holder here, in Redis,
with a TTL (SLUICEGATE_STORED_RESPONSE_TTL). A holder that could not be written only costs the
later calls (a 404); a holder that cannot be read is Redis being down (503), never another team's
response.

The holder also keeps the conversation's size: the prompt and output tokens of the response (the
worker's prompt for it held everything before), which a continuation brings to the worker again
and so is reserved and billed with (gateway.proxy.pipeline). A stream's response is named before
its usage is known: its holder is written with the size so far and corrected when it ends, by the
request that wrote it only.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Protocol

from gateway.errors import StoreUnavailable

log = logging.getLogger("sluicegate.stored_responses")

_FIELDS = ("team", "model", "answer_name", "pool", "endpoint")
# A response id, whoever chose it (a client naming one, a worker making one): checked before it is
# used in a Redis key or a worker URL.
RESPONSE_ID_RE = re.compile(r"[A-Za-z0-9_-]{1,128}")


@dataclass(frozen=True, slots=True)
class Holder:
    team: str  # the team's id (gateway.keys.store.team_info), never its name
    model: str  # the gateway's model, which the caller's key must be allowed
    answer_name: str  # the name the client used, told back in place of the worker's
    pool: str
    endpoint: str  # the URL of the worker process that stored it
    tokens: int = 0  # the conversation's size: the response's prompt and output tokens


class Holders(Protocol):
    """Where holders are kept (gateway/routing/holder_store.py), each call bounded in time;
    each raises StoreUnavailable."""

    async def put_first(self, response_id: str, value: str, ttl_ms: int) -> bool: ...

    async def replace(self, response_id: str, value: str) -> None: ...

    async def get(self, response_id: str) -> str | None: ...

    async def delete(self, response_id: str) -> None: ...


class StoredResponses:
    def __init__(self, store: Holders, *, ttl_s: float) -> None:
        self._store = store
        self._ttl_ms = max(1, int(ttl_s * 1000))

    async def remember(self, response_id: str, holder: Holder) -> bool:
        """True if this call wrote the holder (the caller may then `resize` it)."""
        if not RESPONSE_ID_RE.fullmatch(response_id):
            log.warning("stored response not remembered: the worker's id is not a response id")
            return False
        try:
            # The first holder stands; a worker cannot move another team's response.
            return await self._store.put_first(response_id, _encode(holder), self._ttl_ms)
        except StoreUnavailable as exc:
            log.warning("stored response not remembered error=%s", exc.reason)
            return False

    async def resize(self, response_id: str, holder: Holder) -> None:
        """Rewrites a holder that the caller wrote (`remember` said so) with its final size. XX:
        one deleted meanwhile stays deleted; KEEPTTL: it lives no longer than it would have."""
        try:
            await self._store.replace(response_id, _encode(holder))
        except StoreUnavailable as exc:
            log.warning("stored response not resized error=%s", exc.reason)

    async def find(self, response_id: str) -> Holder | None:
        try:
            raw = await self._store.get(response_id)
        except StoreUnavailable as exc:
            raise StoreUnavailable(exc.reason, "Redis is unavailable.") from None
        if raw is None:
            return None
        parts = raw.split("\x1f")
        if len(parts) == len(_FIELDS):  # written before holders kept the size
            parts.append("0")
        if len(parts) != len(_FIELDS) + 1 or not (parts[-1].isascii() and parts[-1].isdigit()):
            return None
        team, model, answer_name, pool, endpoint, tokens = parts
        return Holder(team, model, answer_name, pool, endpoint, int(tokens))

    async def forget(self, response_id: str) -> None:
        try:
            await self._store.delete(response_id)
        except StoreUnavailable as exc:
            log.warning("stored response not forgotten error=%s", exc.reason)


def _encode(holder: Holder) -> str:
    return "\x1f".join([*(getattr(holder, f) for f in _FIELDS), str(holder.tokens)])
