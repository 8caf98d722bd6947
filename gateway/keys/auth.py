"""API-key authentication, from wherever the client APIs take a key (gateway.keys.credentials:
`Authorization: Bearer <key>`, Anthropic's `x-api-key`, ...), with a short local cache.

The cache saves a Redis round trip per request. Revocations and rotations are published on a
Redis channel that every replica follows, dropping the entry at once; the TTL (1 s by default)
is the backstop for a replica whose subscription was down. Expiry is checked on every request
against the cached record, so an expired key stops at its time even while cached.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass

from starlette.datastructures import Headers

from gateway.errors import ErrorCode, GatewayError, StoreUnavailable
from gateway.keys.credentials import BEARER, Credential, described, read_key
from gateway.keys.store import KeyRecord, KeyStore, TeamInfo, hash_secret
from gateway.limits.spec import LimitSet

_MAX_CACHED = 50_000
log = logging.getLogger("sluicegate.auth")


def bearer_token(headers: Headers) -> str | None:
    """The admin token (the admin API, the console's sign-in, /metrics): None for none, another
    scheme, and two `Authorization` headers with different tokens, which is refused like a wrong
    one rather than the first believed (as a client key sent twice is, gateway.keys.credentials)."""
    tokens = {_bearer(value) for value in headers.getlist("authorization")}
    return tokens.pop() if len(tokens) == 1 else None


def _bearer(value: str) -> str | None:
    scheme, _, token = value.partition(" ")
    if scheme.lower() != "bearer":
        return None
    return token.strip() or None


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling: the key, its team's limits (which apply on top of the key's own), and the
    id its team was given when it was made (gateway.keys.store.team_info): what the team's cache
    salt and stored responses are bound to."""

    key: KeyRecord
    team_limits: LimitSet
    team_id: str


class Authenticator:
    def __init__(
        self,
        store: KeyStore,
        *,
        cache_ttl_s: float,
        timeout_s: float,
        credentials: Sequence[Credential] = (BEARER,),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`store`: the keys' (gateway/keys/store.py), whose look-ups go through the app's Redis
        breaker. `credentials`: where client routes take a key, every client API's (the app hands
        them down from gateway.apis); the admin API reads its token with `bearer_token`.
        `clock`: what the cache's TTL is measured on (a test's own, to prove the bound)."""
        self._clock = clock
        self._credentials = tuple(credentials)
        self._store = store
        self._ttl = cache_ttl_s
        self._timeout_s = timeout_s
        # secret hash -> (key record, or None for no such key; expiry); "team:<name>" -> the team
        self._cache: dict[str, tuple[KeyRecord | TeamInfo | None, float]] = {}
        self._loading: dict[str, asyncio.Future[KeyRecord | TeamInfo | None]] = {}

    async def authenticate(self, headers: Headers, query: Mapping[str, str] | None = None) -> Principal:
        token = read_key(self._credentials, headers, query or {})
        if token is None:
            raise GatewayError(
                ErrorCode.INVALID_API_KEY, f"Missing API key: send it as {described(self._credentials)}."
            )
        record = await self._cached(hash_secret(token), self._store.lookup)
        if not isinstance(record, KeyRecord):
            raise GatewayError(ErrorCode.INVALID_API_KEY, "Invalid API key.")
        refusal = record.refusal(time.time())
        if refusal is not None:
            raise GatewayError(ErrorCode.INVALID_API_KEY, refusal)
        team = await self._cached(f"team:{record.team}", self._team_info)
        if not isinstance(team, TeamInfo) or not record.belongs_to(team):
            # A team's deletion revokes the keys it sees; one made while it ran names the deleted
            # team's id (gateway/keys/deletion.py): with no team, or another team of that name,
            # nothing could bind its salt or stored responses.
            raise GatewayError(ErrorCode.INVALID_API_KEY, f"API key {record.id} has no team.")
        return Principal(record, team.limits, team.id)

    async def _team_info(self, entry: str) -> TeamInfo | None:
        return await self._store.team_info(entry.removeprefix("team:"))

    async def _cached(
        self, entry: str, load: Callable[[str], Awaitable[KeyRecord | TeamInfo | None]]
    ) -> KeyRecord | TeamInfo | None:
        now = self._clock()
        cached = self._cache.get(entry)
        if cached is not None and (
            cached[1] > now or (not self._store.lookups_available and cached[0] is not None)
        ):
            return cached[0]  # fresh, or stale while Redis is known to be away
        try:
            # While the breaker is open, an entry never seen here may probe (the store's
            # `guarded`, gateway/redis/breaker.py); anything else is refused at once.
            return await self._store.guarded(
                lambda: self._pending(entry, load), timeout_s=self._timeout_s, may_probe=cached is None
            )
        except StoreUnavailable:
            if cached is not None and cached[0] is not None:
                # What this replica saw moments ago keeps working through a Redis blip.
                return cached[0]
            raise GatewayError(
                ErrorCode.REDIS_UNAVAILABLE, "The key store is unavailable; try again shortly."
            ) from None

    def _pending(
        self, entry: str, load: Callable[[str], Awaitable[KeyRecord | TeamInfo | None]]
    ) -> Awaitable[KeyRecord | TeamInfo | None]:
        """One lookup per entry at a time: when a popular key's entry expires under load, every
        request that finds it stale waits on the same Redis call instead of making its own (each
        waiter's own leaving does not cut it short for the others)."""
        pending = self._loading.get(entry)
        if pending is None:
            pending = self._loading[entry] = asyncio.ensure_future(self._load(entry, load))
            pending.add_done_callback(self._loaded)
        return asyncio.shield(pending)

    def _loaded(self, done: asyncio.Future[KeyRecord | TeamInfo | None]) -> None:
        for entry, pending in list(self._loading.items()):
            if pending is done:
                del self._loading[entry]
        if not done.cancelled():
            done.exception()  # every waiter may have given up on it: mark the error as seen

    async def _load(
        self, entry: str, load: Callable[[str], Awaitable[KeyRecord | TeamInfo | None]]
    ) -> KeyRecord | TeamInfo | None:
        async with asyncio.timeout(self._timeout_s):
            value = await load(entry)
        if len(self._cache) >= _MAX_CACHED:
            self._cache.clear()
        self._cache[entry] = (value, self._clock() + self._ttl)
        return value

    def forget(self, entry: str) -> None:
        """Drops a secret hash, or `team:<name>`, from the cache."""
        self._cache.pop(entry, None)

    async def follow_invalidations(self) -> None:
        """Runs for the app's life: drops every secret hash published on the channel. Whatever was
        published while the subscription was down is unknown, so each (re)subscription marks every
        entry stale: each is read again, but still serves if that read fails (a Redis that is back
        but still loading answers SUBSCRIBE yet not reads). During the outage itself cached keys
        keep working: a revocation needs Redis too. On a cluster, a lost subscription moves to the
        next node (gateway/redis/subscribe.py); until it is back, the cache TTL is the bound."""
        await self._store.follow_invalidations(self.forget, self._all_stale)

    def _all_stale(self) -> None:
        self._cache = {entry: (value, 0.0) for entry, (value, _) in self._cache.items()}
