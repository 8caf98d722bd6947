"""Concurrency slots held as long as their requests run, on a short lease.

admit.lua takes a slot with a lease of `lease_s`; a request may run far longer (a stream up to its
`stream_total`). One task per replica renews every slot still held here every `lease_s / 3`, all
of them in one pipelined round trip (one renew.lua call per team, since a script's keys must share
a hash tag), so renewing costs no round trip per request. A replica that dies stops renewing, and
its slots free themselves within `lease_s`. The task runs only while something is held: it starts
with the first slot and ends when the last one is let go.

Not thread-safe: call everything from the event loop thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from typing import Any, Protocol

from gateway.errors import StoreUnavailable

log = logging.getLogger(__name__)

# Renewals per lease: two may fail (a Redis hiccup) before a running request's slot lapses.
RENEWALS_PER_LEASE = 3


class RenewStore(Protocol):
    """Renews slots (gateway/limits/limit_store.py): one renew.lua call per (keys, args), all in
    one round trip, bounded in time; raises StoreUnavailable."""

    async def renew(self, batches: Sequence[tuple[Sequence[str], Sequence[Any]]]) -> None: ...


class Lease:
    """The slots one admitted request holds; `end()` once it is over (idempotent)."""

    __slots__ = ("_keeper", "slots", "team")

    def __init__(self, keeper: LeaseKeeper, team: str, slots: tuple[tuple[str, str], ...]) -> None:
        self._keeper = keeper
        self.team = team
        self.slots = slots  # (the limit's sorted set, the request id holding a slot in it)

    def end(self) -> None:
        self._keeper.release(self)


class LeaseKeeper:
    def __init__(self, store: RenewStore, *, lease_s: float) -> None:
        self.lease_s = lease_s
        self._store = store
        self._held: dict[Lease, None] = {}  # insertion-ordered set
        self._task: asyncio.Task[None] | None = None
        self.renewals = 0  # round trips that renewed (tests and the hot-path note count them)

    def __len__(self) -> int:
        return len(self._held)

    @property
    def renewing(self) -> bool:
        """Whether the renewing task runs (only while a slot is held)."""
        return self._task is not None

    def hold(self, team: str, slots: Sequence[tuple[str, str]]) -> Lease:
        lease = Lease(self, team, tuple(slots))
        self._held[lease] = None
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._renew_while_held())
        return lease

    def release(self, lease: Lease) -> None:
        self._held.pop(lease, None)

    async def aclose(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _renew_while_held(self) -> None:
        try:
            while self._held:
                await asyncio.sleep(self.lease_s / RENEWALS_PER_LEASE)
                if not self._held:
                    return
                try:
                    await self._renew()
                    self.renewals += 1
                except StoreUnavailable as exc:
                    # The next tick tries again; the lease has room for two misses.
                    log.warning("concurrency lease renewal failed: %s", exc.reason)
        finally:
            if self._task is asyncio.current_task():
                self._task = None

    async def _renew(self) -> None:
        by_team: dict[str, list[tuple[str, str]]] = {}
        for lease in self._held:
            by_team.setdefault(lease.team, []).extend(lease.slots)
        # A Redis that lost the script (restart, failover) has it loaded and the batch sent again.
        lease_s = self.lease_s
        await self._store.renew(
            [([key for key, _ in slots], (lease_s, *(rid for _, rid in slots))) for slots in by_team.values()]
        )
