"""Each team's monthly money budget as a share used, for the chart's alert at 80 %, exported by
one replica only: every replica can read the same counters from Redis, so if each exported them
every team would be a series per replica and the alert would fire once per replica. The replicas
hold a lease in Redis (export_lease.lua) for three export intervals; the holder sets

    sluicegate_team_monthly_cost_budget_used_ratio{team}

from the budget's admission counter (what admit.lua reserved and settle.lua settled this month,
in nano-units) over the budget, and every other replica exports no series of it. A holder that
dies leaves the series to the next holder within three intervals; the alert takes `max by (team)`
so a hand-over's brief overlap still fires once.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import secrets
from typing import Protocol

from prometheus_client import CollectorRegistry, Gauge

from gateway.errors import StoreUnavailable
from gateway.keys.store import KeyStore
from gateway.limits.plans import budget_periods
from gateway.limits.spec import parse_limits
from gateway.redis import keys as redis_keys

log = logging.getLogger("sluicegate.budgets")

GAUGE = "sluicegate_team_monthly_cost_budget_used_ratio"
_LEASES_PER_INTERVAL = 3


class BudgetReads(Protocol):
    """gateway/metering/budget_store.py; each raises StoreUnavailable."""

    async def hold_lease(self, holder: str, lease_ms: int) -> bool: ...

    async def spent(self, counter_keys: list[str]) -> list[int]: ...


class BudgetGauge:
    def __init__(
        self,
        store: BudgetReads,
        keystore: KeyStore,
        registry: CollectorRegistry,
        *,
        interval_s: float,
        timeout_s: float,
    ) -> None:
        self._store = store
        self._keystore = keystore
        self._id = secrets.token_hex(8)  # this replica, among those sharing the Redis
        self._interval_s = interval_s
        self._timeout_s = timeout_s
        self.gauge = Gauge(
            GAUGE,
            "The share of the team's monthly money budget spent this UTC month (exported by one "
            "replica: the holder of a lease in Redis).",
            ["team"],
            registry=registry,
        )
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        while True:
            try:
                async with asyncio.timeout(4 * self._timeout_s):
                    await self.export()
            except (StoreUnavailable, TimeoutError) as exc:
                self.gauge.clear()  # not known to be the holder: export nothing
                reason = exc.reason if isinstance(exc, StoreUnavailable) else type(exc).__name__
                log.warning("budget export failed: %s", reason)
            await asyncio.sleep(self._interval_s)

    async def export(self, now: dt.datetime | None = None) -> bool:
        """One round: True when this replica holds the lease (and so exports the series)."""
        lease_ms = int(self._interval_s * _LEASES_PER_INTERVAL * 1000)
        if not await self._store.hold_lease(self._id, lease_ms):
            self.gauge.clear()
            return False
        now = now or dt.datetime.now(dt.UTC)
        budgets: list[tuple[str, str, int]] = []  # (team, counter key, budget in nano-units)
        for team in await self._keystore.teams():
            raw = team.get("limits")
            limits = parse_limits(raw if isinstance(raw, dict) else {}, budgets=True)
            if not limits.monthly_cost:
                continue
            name = str(team["name"])
            for period in budget_periods(limits, "", f"team {name}", redis_keys.rate_limits(name), now):
                if period.limit.name == "monthly_cost":
                    budgets.append((name, period.limit.redis_key, period.limit.amount))
        spent = await self._store.spent([key for _, key, _ in budgets])
        self.gauge.clear()  # teams whose budget went away stop being exported
        for (name, _, budget), used in zip(budgets, spent, strict=True):
            self.gauge.labels(name).set(used / budget)
        return True
