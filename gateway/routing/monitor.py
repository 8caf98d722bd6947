"""The router's background work: confirming new endpoints, probing `/health`, scraping load.

Three loops, started in the app's lifespan and stopped with it. Each round looks for the endpoints
that are due and starts their checks, each on its own task, and the results are applied on the
event loop; nothing here is on a request's path. An endpoint has at most one check of a kind out
at a time, and the round does not wait for them: an endpoint that never answers delays its own
checks, and takes one of the `concurrency` slots of that kind (probes and confirmations share
theirs, scrapes have their own) until its timeout.

- pending endpoints: `GET /v1/models` about once a second until it lists the pool's wire model
  (allowed min(2 s, connect));
- every confirmed endpoint: `GET /health` every `health.probe_interval`, allowed the pool's
  connect timeout, or at the first round with none out when one team's failures made it suspect
  (`Endpoint.probe_now`);
- usable endpoints of pools routed by load: `GET /metrics` about once a second (or each
  probe_interval if shorter), allowed the connect timeout. A load is forgotten (in-flight counts
  decide) once no scrape has refreshed it for `_STALE_AFTER` intervals: when a scrape fails past
  that, or when the one still out has gone unanswered that long. A loop that was late keeps it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import orjson

from gateway.routing.endpoint import CONFIRM_INTERVAL_S, Endpoint
from gateway.routing.load import apply_load, forget_load, parse_load
from gateway.routing.pool import Pool
from gateway.routing.router import Router
from gateway.worker.client import WorkerClient
from gateway.worker.http import LocalExhaustion, WorkerHttpError

log = logging.getLogger("sluicegate.routing")

SCRAPE_INTERVAL_S = 1.0
_MAX_BODY = 1024 * 1024
# A scrape older than this many intervals says nothing about the endpoint now.
_STALE_AFTER = 3


class Monitor:
    def __init__(
        self,
        router: Router,
        client: WorkerClient,
        *,
        concurrency: int = 32,
        tick_s: float = 0.1,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._router = router
        self._client = client  # the app's one worker client
        # Separate slots, so that hung scrapes never hold up a probe, nor hung probes a scrape.
        self._slots = {"probe": asyncio.Semaphore(concurrency), "scrape": asyncio.Semaphore(concurrency)}
        self._tick_s = tick_s
        self._clock = clock
        self._tasks: list[asyncio.Task[None]] = []
        self._checks: set[asyncio.Task[None]] = set()
        # (kind, endpoint) for each check out, until its task is done (started or not).
        self._running: set[tuple[str, Endpoint]] = set()

    def start(self) -> None:
        for loop in (self._confirm_round, self._probe_round, self._scrape_round):
            self._tasks.append(asyncio.ensure_future(self._forever(loop)))

    async def stop(self) -> None:
        for task in (*self._tasks, *self._checks):
            task.cancel()
        for task in (*self._tasks, *self._checks):
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()

    async def _forever(self, round_: Callable[[], Awaitable[None]]) -> None:
        while True:
            try:
                await round_()
            except Exception:  # a bug in one round must not end the loop for good
                log.exception("routing monitor round failed")
            await asyncio.sleep(self._tick_s)

    def _check(
        self, kind: str, endpoint: Endpoint, check: Callable[..., Coroutine[Any, Any, None]], *args: Any
    ) -> bool:
        """Starts `check(*args)` unless one of its kind is still out for `endpoint`; False when one
        is."""
        running = (kind, endpoint)
        if running in self._running:
            return False
        self._running.add(running)

        async def run() -> None:
            try:
                await check(*args)
            except Exception:  # a bug in one check must not be lost in a task nobody awaits
                log.exception("routing monitor %s failed", kind)

        def done(task: asyncio.Task[None]) -> None:
            # A callback, not a finally: it runs too for a task cancelled before its first step.
            self._checks.discard(task)
            self._running.discard(running)

        task = asyncio.ensure_future(run())
        self._checks.add(task)
        task.add_done_callback(done)
        return True

    async def _get(self, kind: str, url: str, timeout_s: float) -> tuple[int, bytes] | None:
        """Status and body, or None when the endpoint could not be reached in time;
        `_UNJUDGED` when this process could not even try (its own descriptors or ports ran out)."""
        async with self._slots[kind]:
            try:
                async with asyncio.timeout(timeout_s):
                    answer = await self._client.fetch(
                        "GET", url, b"", {}, connect_s=timeout_s, max_bytes=_MAX_BODY
                    )
            except LocalExhaustion:
                return _UNJUDGED
            except (WorkerHttpError, TimeoutError, ValueError):  # TooLarge too: no load read
                return None
            return answer.status, answer.body

    # -- pending endpoints --------------------------------------------------------------------

    async def _confirm_round(self) -> None:
        now = self._clock()
        for pool in self._router.pools():
            for endpoint in pool.endpoints:
                due = not endpoint.confirmed and now - endpoint.last_probe_at >= CONFIRM_INTERVAL_S
                if due and self._check("probe", endpoint, self._confirm, pool, endpoint):
                    endpoint.last_probe_at = now

    async def _confirm(self, pool: Pool, endpoint: Endpoint) -> None:
        got = await self._read_models(pool, endpoint)
        if got is None or got[0] != 200 or endpoint.removed:
            return
        if pool.wire_model in _model_ids(got[1]):
            log.info("endpoint confirmed pool=%s endpoint=%s", pool.name, endpoint.url)
            pool.confirm(endpoint)

    async def _read_models(self, pool: Pool, endpoint: Endpoint) -> tuple[int, bytes] | None:
        """GET /v1/models, and the context the worker reports for the pool's model (the output
        cap's context clamp, gateway/limits/output.py), read once per endpoint: any answer counts
        as read, so a worker without the route is not asked again."""
        got = await self._get("probe", endpoint.url + "/v1/models", min(2.0, pool.model.timeouts.connect))
        if got is _UNJUDGED:
            return None  # asked again at the next round
        if got is not None:
            endpoint.models_read = True
            endpoint.max_model_len = _max_model_len(got[1], pool.wire_model) if got[0] == 200 else None
        return got

    # -- health probes ------------------------------------------------------------------------

    async def _probe_round(self) -> None:
        now = self._clock()
        for pool in self._router.pools():
            for endpoint in pool.endpoints:
                due = endpoint.confirmed and now - endpoint.last_probe_at >= pool.health.probe_interval
                if due and self._check("probe", endpoint, self._probe, pool, endpoint):
                    endpoint.last_probe_at = now

    async def _probe(self, pool: Pool, endpoint: Endpoint) -> None:
        if not endpoint.models_read:  # a configured endpoint, never confirmed through /v1/models
            await self._read_models(pool, endpoint)
        # The connect timeout, not the interval: a short interval is for noticing a failure soon,
        # and a probe cut at 0.2 s failed every endpoint at once whenever this replica's own loop
        # was late by that much (a 503 for the whole pool from one busy moment of the gateway).
        got = await self._get("probe", endpoint.url + "/health", pool.model.timeouts.connect)
        if got is _UNJUDGED:
            return  # the gateway's own exhaustion: no verdict on the worker, tried at the next round
        # A server without a /health route (404/405) still answered: it is up, and passive
        # ejection still guards its requests. Only silence, errors and 5xx mark it unhealthy.
        ok = got is not None and (got[0] == 200 or got[0] in _NO_HEALTH_ROUTE)
        if ok != endpoint.probe_ok and not endpoint.removed:
            log.warning(
                "endpoint health probe %s pool=%s endpoint=%s",
                "passes" if ok else "fails",
                pool.name,
                endpoint.url,
            )
        if not endpoint.removed:
            pool.probe_result(endpoint, ok)

    # -- load scrapes -------------------------------------------------------------------------

    async def _scrape_round(self) -> None:
        now = self._clock()
        for pool in self._router.pools():
            if not pool.scraped:
                continue
            interval = min(SCRAPE_INTERVAL_S, pool.health.probe_interval)
            stale_s = _STALE_AFTER * interval
            for endpoint in pool.endpoints:
                # Not one that takes no requests: its load decides nothing until it is back (and
                # is old by then), and a dead one's scrapes would hold slots the others need.
                if not endpoint.usable:
                    _forget_if_stale(endpoint, now, stale_s)
                    continue
                if now - endpoint.last_scrape_at < interval:
                    continue
                if self._check("scrape", endpoint, self._scrape, pool, endpoint, interval):
                    endpoint.last_scrape_at = now
                elif now - endpoint.last_scrape_at > stale_s:
                    forget_load(endpoint)  # the scrape still out has gone unanswered that long

    async def _scrape(self, pool: Pool, endpoint: Endpoint, interval: float) -> None:
        got = await self._get("scrape", endpoint.url + "/metrics", pool.model.timeouts.connect)
        load = parse_load(got[1].decode("utf-8", "replace")) if got is not None and got[0] == 200 else None
        if load is not None:
            apply_load(endpoint, load, self._clock())
        else:
            # Judged here, when a scrape has failed, not in the round: a replica whose own loop
            # was late keeps the load its next scrape will refresh.
            _forget_if_stale(endpoint, self._clock(), _STALE_AFTER * interval)


_NO_HEALTH_ROUTE = frozenset({404, 405})
# `_get`'s answer when the connect failed for this process's own want of descriptors or ports
# (gateway.http.exhaustion): no status, and no verdict. Compared by identity.
_UNJUDGED: tuple[int, bytes] = (0, b"")


def _forget_if_stale(endpoint: Endpoint, now: float, stale_s: float) -> None:
    if endpoint.scraped_at is not None and now - endpoint.scraped_at > stale_s:
        forget_load(endpoint)


def _models(body: bytes) -> list[dict[str, Any]]:
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError:
        return []
    data = parsed.get("data") if isinstance(parsed, dict) else None
    return [item for item in data if isinstance(item, dict)] if isinstance(data, list) else []


def _model_ids(body: bytes) -> set[str]:
    return {item["id"] for item in _models(body) if isinstance(item.get("id"), str)}


def _max_model_len(body: bytes, model: str) -> int | None:
    """vLLM's `max_model_len` of `model` in a /v1/models answer; None when it reports none."""
    for item in _models(body):
        length = item.get("max_model_len")
        if item.get("id") == model and type(length) is int and length > 0:
            return length
    return None
