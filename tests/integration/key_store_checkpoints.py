"""What tests/integration/test_key_store_steps.py and test_key_store_attack.py share: a checkpoint
that runs another write at one step, a journal that takes every entry, and the gateway's own
Authenticator (no cache) asked whether a secret works."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from starlette.datastructures import Headers

from gateway.errors import ErrorCode, GatewayError
from gateway.keys.auth import Authenticator
from gateway.keys.store import KeyStore

T = TypeVar("T")


class RunAt:
    """A checkpoint that runs `other` once, before the write's step number `at`, and counts the
    steps (so a test knows it reached every one)."""

    def __init__(self, at: int, other: Callable[[], Awaitable[None]]) -> None:
        self.at = at
        self.count = 0
        self._other = other

    async def __call__(self, step: str) -> None:
        if self.count == self.at:
            await self._other()
        self.count += 1


class Journal:
    """Takes every entry (so the writes run their journal step)."""

    async def write(self, action: str, *, team: str, key_id: str | None = None, **change: Any) -> None:
        return None


async def outcome(call: Awaitable[T]) -> tuple[T | None, ErrorCode | None]:
    """What a call returned, or the code of the gateway error it raised."""
    try:
        return await call, None
    except GatewayError as exc:
        return None, exc.code


async def authenticates(store: KeyStore, secret: str) -> bool:
    auth = Authenticator(store, cache_ttl_s=0.0, timeout_s=5.0)
    principal, code = await outcome(auth.authenticate(Headers({"authorization": f"Bearer {secret}"})))
    assert code in (None, ErrorCode.INVALID_API_KEY)
    return principal is not None
