"""One pool: a set of interchangeable endpoints, their in-flight slots and the fair queue in front
of them.

Each endpoint takes at most `max_inflight_per_endpoint` requests from this replica. When every
usable endpoint is full a request waits in the pool's queue, weighted fair across teams: by the
tokens each team was served, on counters every replica shares (`fairness: tokens`, the default:
tokenqueue.py, vtc.py), or by request count on this replica (`requests`: fairqueue.py). A freed
slot goes straight to the next waiter (`drain`), never to a newcomer, so arriving later cannot
mean being served sooner. A request with a deadline that the queue cannot meet is refused at once,
on arrival or while it waits (gateway/routing/deadline.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import random
import time
from collections.abc import Callable, Collection, Sequence
from typing import cast

from gateway.errors import ErrorCode, GatewayError
from gateway.model_table import ModelConfig, PoolConfig
from gateway.observability.metrics import Metrics
from gateway.routing import health
from gateway.routing.deadline import HOLD_ALPHA, PoolDeadlines
from gateway.routing.dispatch import TokenDispatch
from gateway.routing.endpoint import Endpoint, EndpointState
from gateway.routing.fairqueue import DeadlineUnreachable, FairQueue, QueueFull, QueueTimeout
from gateway.routing.policy import POLICIES, SCRAPED_POLICIES, Policy, RouteRequest
from gateway.routing.prefix import PrefixRouting
from gateway.routing.share import ShareTicket
from gateway.routing.tokenqueue import TokenQueue
from gateway.routing.unavailable import PoolUnavailable, next_chance_s, why_unavailable
from gateway.routing.vtc_store import FairShareStore


class Pool:
    def __init__(
        self,
        model: ModelConfig,
        config: PoolConfig,
        metrics: Metrics,
        *,
        rng: random.Random,
        clock: Callable[[], float] = time.monotonic,
        previous: Pool | None = None,
        prefix: PrefixRouting | None = None,
        fair_share: FairShareStore | None = None,
    ) -> None:
        self.model = model
        self.config = config
        self.name = config.name
        self.weight = config.weight
        self.wire_model = config.upstream_model or model.wire_model
        self.policy_name = model.routing.policy
        self.use_policy(POLICIES[self.policy_name])
        self.scraped = self.policy_name in SCRAPED_POLICIES
        # prefix_affinity only: the cached-prefix lookup before the policy, the record after.
        self.prefix = prefix
        self.max_inflight = model.routing.max_inflight_per_endpoint
        self.health = model.health
        self.discovered = config.kubernetes is not None
        self._metrics = metrics
        self._clock = clock
        self._rng = rng
        # fairness "tokens": the shared counters choose between the teams waiting (dispatch.py).
        self.queue: FairQueue[Endpoint] | TokenQueue[Endpoint]
        self.tokens: TokenDispatch | None = None
        if model.routing.fairness == "tokens":
            self.tokens = TokenDispatch(
                self.name,
                model.routing.max_queue,
                metrics,
                fair_share,
                take_slot=self._take_slot,
                release=self.release,
                clock=clock,
            )
            self.queue = self.tokens.queue
        else:
            self.queue = FairQueue(model.routing.max_queue, on_orphan=self.release, clock=clock)
        self._queue_wait = metrics.queue_wait_seconds.labels(self.name)
        # Seconds a request holds a slot, a moving average (None: none released yet): the queue's
        # service rate, which the deadline estimate reads.
        self.hold_s: float | None = None
        self.deadlines = PoolDeadlines(
            self.name,
            model.name,
            metrics,
            cast("FairQueue[object] | TokenQueue[object]", self.queue),
            hold=lambda: self.hold_s,
            slots=lambda: self.healthy_count() * self.max_inflight,
            clock=clock,
        )
        self.endpoints: list[Endpoint] = []
        self._by_url: dict[str, Endpoint] = {}
        self._ejected: list[Endpoint] = []
        if previous is not None:
            for endpoint in previous.endpoints:
                self._add(endpoint)
        else:
            for url in config.endpoints:
                self._add(Endpoint(url, confirmed=True))
        self._export_gauges()

    def use_policy(self, policy: Policy) -> None:
        """`policy` picks the endpoints of this pool from now on (bench/routing_bench.py swaps it).
        Kept typed as it behaves, returning one of the candidates it is given: one cast here, not
        a `typing.cast` call (a Python call) per request."""
        self.policy = cast(Callable[[Sequence[Endpoint], RouteRequest, random.Random], Endpoint], policy)

    # -- membership ---------------------------------------------------------------------------

    def _add(self, endpoint: Endpoint) -> None:
        self.endpoints.append(endpoint)
        self._by_url[endpoint.url] = endpoint
        if endpoint.ejected_until is not None:
            self._ejected.append(endpoint)
        gauge = self._metrics.endpoint_inflight.labels(self.name, endpoint.url)
        gauge.set_function(lambda: endpoint.inflight)

    def set_endpoints(self, urls: Collection[str]) -> None:
        """Replaces the set. New URLs start pending (confirmed by the monitor); removed ones take
        no new requests, and the ones in flight finish."""
        wanted = set(urls)
        for endpoint in list(self.endpoints):
            if endpoint.url not in wanted:
                self._remove(endpoint)
        for url in urls:
            if url not in self._by_url:
                self._add(Endpoint(url, confirmed=False))

    def _remove(self, endpoint: Endpoint) -> None:
        endpoint.removed = True
        endpoint.refresh()
        self.endpoints.remove(endpoint)
        del self._by_url[endpoint.url]
        if endpoint in self._ejected:
            self._ejected.remove(endpoint)
        self._forget_endpoint_series(endpoint)

    def _forget_endpoint_series(self, endpoint: Endpoint) -> None:
        for metric in (self._metrics.endpoint_inflight, self._metrics.endpoint_ejections):
            with contextlib.suppress(KeyError):
                metric.remove(self.name, endpoint.url)

    def attach(self, store: FairShareStore | None) -> list[asyncio.Task[None]]:
        """Token fair share goes through Redis from now on (None: the app is stopping; returns
        the tasks talking to Redis it cancelled, to await before Redis closes)."""
        return [] if self.tokens is None else self.tokens.attach(store)

    def close(self) -> None:
        """The pool is gone (its model was removed or replaced without it): drop its series."""
        self.deadlines.close()
        if self.tokens is not None:
            self.tokens.close()
        for endpoint in self.endpoints:
            endpoint.removed = True
            endpoint.refresh()
            self._forget_endpoint_series(endpoint)
        m = self._metrics
        per_pool = (m.pool_healthy_endpoints, m.pool_queue_depth, m.queue_wait_seconds, m.upstream_retries)
        for metric in per_pool:
            with contextlib.suppress(KeyError):
                metric.remove(self.name)
        for state in EndpointState:
            with contextlib.suppress(KeyError):
                m.pool_endpoints.remove(self.name, state.value)

    def _export_gauges(self) -> None:
        m = self._metrics
        m.pool_healthy_endpoints.labels(self.name).set_function(self.healthy_count)
        m.pool_queue_depth.labels(self.name).set_function(lambda: len(self.queue))
        for state in EndpointState:
            if state is not EndpointState.REMOVED:
                m.pool_endpoints.labels(self.name, state.value).set_function(
                    functools.partial(self.count_in_state, state)
                )

    def count_in_state(self, state: EndpointState) -> int:
        return sum(1 for e in self.endpoints if e.state is state)

    def healthy_count(self) -> int:
        return sum(1 for e in self.endpoints if e.usable)

    def has_usable(self) -> bool:
        return any(e.usable for e in self.endpoints)

    def get(self, url: str) -> Endpoint | None:
        return self._by_url.get(url)

    # -- slots --------------------------------------------------------------------------------

    def try_acquire(
        self,
        route: RouteRequest,
        rng: random.Random,
        exclude: Sequence[Endpoint] = (),
        deferred: list[RouteRequest] | None = None,
    ) -> tuple[Endpoint, bool] | None:
        """A slot now, without waiting: (endpoint, is_trial), or None when the caller must queue.
        Raises PoolUnavailable when no endpoint could take the request even after a wait.

        `deferred`: the prefix index is not told of the pick; the route to tell it with is
        appended there instead, for `accepted()` once the worker took the request (a prompt the
        worker refuses must not fill the index)."""
        got = self._try_acquire(route, rng, exclude, deferred)
        if got is not None and self.tokens is not None:
            self.tokens.dispatched(_ticket(route))
        return got

    def _try_acquire(
        self,
        route: RouteRequest,
        rng: random.Random,
        exclude: Sequence[Endpoint],
        deferred: list[RouteRequest] | None,
    ) -> tuple[Endpoint, bool] | None:
        if route.pinned is not None:
            return self._pinned(route.pinned, exclude)
        if self._ejected:
            trial = self._trial(exclude)
            if trial is not None:
                return trial, True
        if not self.queue:  # a waiter goes first: no barging past the queue
            limit = self.max_inflight
            candidates = [e for e in self.endpoints if e.usable and e.inflight < limit and e not in exclude]
            if candidates:
                started = time.perf_counter()
                if self.prefix is not None:
                    route = self.prefix.annotate(route, candidates)
                chosen = self.policy(candidates, route, rng)
                if deferred is not None:
                    deferred.append(route)
                elif self.prefix is not None:
                    self.prefix.record(route, chosen.url)
                self._metrics.routing_decision.observe(time.perf_counter() - started)
                chosen.inflight += 1
                return chosen, False
        if not any(e.usable and e not in exclude for e in self.endpoints):
            raise PoolUnavailable(why_unavailable(self.name, self.endpoints), self.next_chance_s())
        return None

    def _pinned(self, url: str, exclude: Sequence[Endpoint]) -> tuple[Endpoint, bool]:
        """Only this endpoint holds what the request continues: it serves it, or nobody does. No
        queue: a freed slot goes to whichever waiter is next, which need not be this endpoint."""
        endpoint = self._by_url.get(url)
        if endpoint is None or endpoint in exclude:
            raise PoolUnavailable(f"pool '{self.name}' no longer has the endpoint that holds it")
        if endpoint.inflight >= self.max_inflight:
            raise self._saturated(ErrorCode.POOL_SATURATED, "the one that holds this response is full")
        endpoint.inflight += 1
        return endpoint, False

    def next_chance_s(self) -> float | None:
        """Seconds until an endpoint of this pool may take requests again (None: none waits to)."""
        return next_chance_s(self.endpoints, self.health.probe_interval, self._clock())

    def _trial(self, exclude: Sequence[Endpoint]) -> Endpoint | None:
        now = self._clock()
        for endpoint in self._ejected:
            if endpoint.trial_ready(now) and endpoint not in exclude:
                endpoint.trial_inflight = True
                endpoint.inflight += 1
                return endpoint
        return None

    async def acquire(
        self,
        route: RouteRequest,
        rng: random.Random,
        exclude: Sequence[Endpoint],
        max_wait: float,
        deferred: list[RouteRequest] | None = None,
    ) -> tuple[Endpoint, bool]:
        """A slot, waiting in the fair queue (at most `max_wait` s) when the pool is saturated.
        `deferred`: as for `try_acquire`."""
        got = self.try_acquire(route, rng, exclude, deferred)
        if got is not None:
            return got
        started = self._clock()
        ticket = _ticket(route)
        queue = self.queue
        estimate, timeout, by_deadline = self.deadlines.arrival(ticket, started, max_wait)
        try:
            if isinstance(queue, TokenQueue):
                endpoint = await queue.wait(ticket, timeout)
            else:
                endpoint = await queue.wait(route.team, route.share_weight, timeout)
        except QueueFull:
            self._metrics.queue_rejections.labels(self.name, "full").inc()
            raise self._saturated(ErrorCode.POOL_SATURATED, "its queue is full") from None
        except DeadlineUnreachable as exc:
            self._queue_wait.observe(self._clock() - started)
            raise self.deadlines.refused("queued", exc.estimate_s) from None
        except QueueTimeout:
            self._queue_wait.observe(self._clock() - started)
            if by_deadline:  # its deadline passed while it waited: refused as such, never silently
                raise self.deadlines.refused("queued", None) from None
            self._metrics.queue_rejections.labels(self.name, "timeout").inc()
            raise self._saturated(ErrorCode.QUEUE_TIMEOUT, f"none was free within {max_wait:g}s") from None
        waited = self._clock() - started
        self._queue_wait.observe(waited)
        self.deadlines.served(waited, estimate)
        if deferred is not None:
            deferred.append(route)
        elif self.prefix is not None:
            self.prefix.record(route, endpoint.url)  # a queued request takes any slot: no lookup
        return endpoint, False

    def accepted(self, route: RouteRequest, endpoint: Endpoint) -> None:
        """The worker took a request picked with `deferred`: now the prefix index learns of it."""
        if self.prefix is not None:
            self.prefix.record(route, endpoint.url)

    def _saturated(self, code: ErrorCode, why: str) -> GatewayError:
        return GatewayError(
            code,
            f"Every worker for model '{self.model.name}' is busy and {why}; try again shortly.",
            headers={"retry-after": "1"},
        )

    def release(self, endpoint: Endpoint, held_s: float | None = None) -> None:
        """`held_s`: how long the request held the slot (a request served: the service rate)."""
        endpoint.inflight -= 1
        if held_s is not None:
            hold = self.hold_s
            self.hold_s = held_s if hold is None else hold + HOLD_ALPHA * (held_s - hold)
        if self.queue:
            self.drain()

    def drain(self) -> None:
        """Hands free slots to waiters, oldest fair share first."""
        if self.tokens is not None:
            self.tokens.drain()
            return
        queue = self.queue
        assert isinstance(queue, FairQueue)
        while queue:
            chosen = self._take_slot()
            if chosen is None:
                return
            if not queue.offer(chosen):
                chosen.inflight -= 1
                return

    def _take_slot(self) -> Endpoint | None:
        """A free slot for whichever request waits next, taken; None when every one is busy."""
        limit = self.max_inflight
        free = [e for e in self.endpoints if e.usable and e.inflight < limit]
        if not free:
            return None
        chosen = self.policy(free, _ANY_REQUEST, self._rng)
        chosen.inflight += 1
        return chosen

    # -- health -------------------------------------------------------------------------------

    def report(self, endpoint: Endpoint, verdict: health.Verdict, *, trial: bool) -> None:
        """The verdict of one request on `endpoint` (gateway.routing.health says what it does)."""
        change = health.record(endpoint, verdict, self.health, self._clock(), trial=trial)
        if change is health.Change.EJECTED:
            if endpoint not in self._ejected and not endpoint.removed:
                self._ejected.append(endpoint)
            self._metrics.endpoint_ejections.labels(self.name, endpoint.url).inc()
        elif change is health.Change.READMITTED:
            self._readmitted(endpoint)
        elif change is health.Change.SUSPECT:
            endpoint.probe_now()

    def _readmitted(self, endpoint: Endpoint) -> None:
        if endpoint in self._ejected:
            self._ejected.remove(endpoint)
        self.drain()

    def probe_result(self, endpoint: Endpoint, ok: bool) -> None:
        was_usable = endpoint.usable
        endpoint.probe_ok = ok
        endpoint.refresh()
        if endpoint.usable and not was_usable:
            self.drain()

    def confirm(self, endpoint: Endpoint) -> None:
        endpoint.confirmed = True
        endpoint.refresh()
        self.drain()


# A queued request takes whichever slot frees first: drain() routes for no request in particular.
_ANY_REQUEST = RouteRequest("")


def _ticket(route: RouteRequest) -> ShareTicket:
    """The request's fair-share ticket; a request without one weighs one token."""
    return route.share if route.share is not None else ShareTicket(route.team, route.share_weight)
