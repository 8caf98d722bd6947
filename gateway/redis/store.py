"""The store layer's base: every Redis command the gateway sends goes through a store.

A store is one concern's Redis side (keys, audit, usage, sessions, fair share, leases...): it
owns that concern's key names and commands and exposes a few narrow async methods. The concern's
other modules declare the few methods they use as a Protocol and never see a Redis client, a
redis-py type or a redis-py exception. A second backend (Valkey-specific, or in-process for the
demo and tests) implements the same methods. The model is the `limits` library's
`limits.aio.storage`: one base, a short subclass per backend.

What every store shares is here, once: a failure of Redis (a redis-py error, a socket error, the
store's own time bound) becomes `StoreUnavailable`, the domain error (503 `redis_unavailable`),
and, for the stores on the request path, the app's breaker (gateway/redis/breaker.py) learns of
it; an answer resets the breaker's count. `__init_subclass__` wraps each public coroutine method a
store defines, so no method can let a redis-py error through; a hot-path method that counts its
calls (admission's, tests/perf/budget.json) maps its own with `unavailable` instead
(`@maps_itself`), the same mapping without the wrapper's call. A call that several callers wait
on at once (the key cache's look-ups) goes `through_breaker`, which also refuses at once while the
breaker is open and lets one probe through. Errors are named by their class only (a Redis error's
text may quote a command's arguments: key names, a team's id).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from redis.exceptions import RedisError

from gateway.errors import StoreUnavailable
from gateway.redis.breaker import RedisBreaker
from gateway.redis.client import RedisClient

# What "Redis could not answer" is, to every store: redis-py's errors (ClusterUnavailableError
# among them), a socket's, and a store's own time bound.
FAILURES = (RedisError, OSError, TimeoutError)
_Method = TypeVar("_Method", bound=Callable[..., Coroutine[Any, Any, Any]])
_T = TypeVar("_T")


def maps_itself(method: _Method) -> _Method:
    """Marks a store method that catches FAILURES itself and raises `self.unavailable(...)`."""
    method.__maps_itself__ = True  # type: ignore[attr-defined]
    return method


class RedisStore:
    """A concern's Redis side. `breaker`: the app's, for stores on the request path (a call
    while it is open still goes out; a store whose callers should not wait asks `available`)."""

    def __init__(self, redis: RedisClient, *, breaker: RedisBreaker | None = None) -> None:
        # Public for the subclasses in other modules; nothing outside a store reads it
        # (tests/seams/test_stores.py).
        self.redis = redis
        self.breaker = breaker

    @property
    def available(self) -> bool:
        """False while the breaker is open: a call moments ago failed."""
        return self.breaker is None or not self.breaker.open

    def unavailable(self, site: str, error: BaseException, started: float | None) -> StoreUnavailable:
        """The domain error for a call made at `started` (time.monotonic()) that failed with
        `error`, the breaker told; `started` None: a background call the breaker does not count."""
        if self.breaker is not None and started is not None:
            self.breaker.failed(site, error, started)
        return StoreUnavailable(type(error).__name__)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for name, value in list(vars(cls).items()):
            maps = getattr(value, "__maps_itself__", False)
            if not name.startswith("_") and inspect.iscoroutinefunction(value) and not maps:
                setattr(cls, name, _mapped(value, f"{cls.__name__}.{name}"))


async def through_breaker(
    breaker: RedisBreaker | None,
    site: str,
    call: Callable[[], Awaitable[_T]],
    *,
    timeout_s: float,
    may_probe: bool,
) -> _T:
    """`call()` awaited for one caller, within `timeout_s`, through `breaker`. While the breaker is
    open it is refused at once (StoreUnavailable), unless `may_probe` and no other call is probing
    (gateway/redis/breaker.py); the probe's outcome closes the breaker or keeps it open, and a
    caller that leaves hands the probe on. A failure (StoreUnavailable, or the time bound) is
    counted at `site` and raised as StoreUnavailable; an answer resets the count. Each caller of a
    call that several wait on is told apart: the breaker counts the failures made in a row."""
    probe = False
    if breaker is not None and breaker.open:
        probe = breaker.probe() if may_probe else False
        if not probe:
            raise StoreUnavailable("BreakerOpen")
    answered = False
    started = time.monotonic()
    try:
        async with asyncio.timeout(timeout_s):
            value = await call()
        answered = True
        if breaker is not None:
            breaker.answered()
    except (StoreUnavailable, TimeoutError) as exc:
        if breaker is not None:
            breaker.failed(site, exc, started)
        raise StoreUnavailable(
            exc.reason if isinstance(exc, StoreUnavailable) else type(exc).__name__
        ) from None
    finally:
        if probe and breaker is not None:
            breaker.probed(answered)
    return value


def _mapped(
    method: Callable[..., Coroutine[Any, Any, Any]], site: str
) -> Callable[..., Coroutine[Any, Any, Any]]:
    @functools.wraps(method)
    async def call(self: RedisStore, *args: Any, **kwargs: Any) -> Any:
        breaker = self.breaker
        started = time.monotonic() if breaker is not None else 0.0
        try:
            result = await method(self, *args, **kwargs)
        except FAILURES as exc:
            raise self.unavailable(site, exc, started) from None
        if breaker is not None and breaker.in_a_row:  # 0 nearly always: a call saved
            breaker.answered()
        return result

    return call
