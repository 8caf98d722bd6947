"""Opening a request to a worker: pick a pool and an endpoint, connect, wait for the response head.

Pools are tried in the router's order (the weighted pick, the model's other pools, then its
fallback models). Within a pool, a connect failure or a 502/503 before any byte of the answer is
retried once on another endpoint: nothing was generated yet, so the retry cannot duplicate work the
client sees. A pool with no healthy endpoint, or whose attempts all failed that way, hands over to
the next pool. Anything after the head is the relay's business; a head that does not come by the
deadline is a timeout, never retried (the deadline is spent).

Every attempt's outcome feeds the endpoint's health (gateway.routing.health): connect errors and
answers that are not HTTP (or redirect) are the endpoint's failures; a 5xx head or a timeout is a
failure the request itself may have provoked, counted for its team; a 4xx is served. For a stream
the verdict waits for its first event.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gateway.errors import ErrorCode, Failure, GatewayError
from gateway.observability import tracing
from gateway.observability.metrics import Metrics
from gateway.routing.endpoint import Endpoint
from gateway.routing.health import ENDPOINT_FAILED, NO_VERDICT, SERVED, Verdict, VerdictKind
from gateway.routing.policy import RouteRequest
from gateway.routing.pool import Pool
from gateway.routing.router import Router
from gateway.routing.unavailable import PoolUnavailable, retry_after
from gateway.worker.client import WorkerClient
from gateway.worker.connection import WorkerResponse
from gateway.worker.http import (
    LocalExhaustion,
    SmallAnswer,
    TooLarge,
    Unanswered,
    Unreachable,
    WorkerHttpError,
    WrongAnswer,
)

if TYPE_CHECKING:
    from gateway.observability.tracing import RequestTrace

log = logging.getLogger("sluicegate.upstream")

_RETRYABLE_STATUS = frozenset({502, 503})
_ATTEMPTS_PER_POOL = 2


@dataclass(slots=True)
class UpstreamResponse:
    pool: Pool
    endpoint: Endpoint
    response: WorkerResponse
    trial: bool
    verdict_pending: bool = True
    team: str = ""  # whose request: a failure it may have provoked is counted per team
    taken_at: float = 0.0  # time.monotonic() when it took its slot: the pool's service rate
    deadline: float | None = None  # its first output's (gateway/routing/deadline.py)

    def served(self) -> None:
        """The stream's first output came in time: the endpoint's verdict for this request."""
        self.report(SERVED)
        if self.deadline is not None:
            self.first_output()

    def first_output(self) -> None:
        """The answer's first output is here: counted as a miss if it came after its deadline."""
        if self.deadline is not None and time.monotonic() > self.deadline:
            self.pool.deadlines.missed()

    def failed(self, error: GatewayError | None, *, provoked: bool = False) -> None:
        """A stream that ended before its first output: timing out, or an event too large (a long
        prompt's `prompt_logprobs`), may be the request's own doing (`provoked`); breaking off or
        ending early (`error` None) is the endpoint's."""
        timed_out = error is not None and error.code is ErrorCode.UPSTREAM_TIMEOUT
        self.report(
            Verdict(VerdictKind.REQUEST_FAILED, self.team) if timed_out or provoked else ENDPOINT_FAILED
        )

    def report(self, verdict: Verdict) -> None:
        """The endpoint's health verdict for this request, once (later calls are ignored)."""
        if self.verdict_pending:
            self.verdict_pending = False
            self.pool.report(self.endpoint, verdict, trial=self.trial)

    def release(self, *, linger_s: float = 0.0) -> None:
        """Give the endpoint's in-flight slot back and close the worker connection if unread (or,
        with `linger_s`, if its answer does not end within that)."""
        self._give_back()
        self.response.release(linger_s=linger_s)

    def close(self) -> None:
        """The same, dropping the worker connection (an engine aborts the generation then)."""
        self._give_back()
        self.response.close()

    def _give_back(self) -> None:
        if self.verdict_pending:
            self.verdict_pending = False
            self.pool.report(self.endpoint, NO_VERDICT, trial=self.trial)
        self.pool.release(self.endpoint, time.monotonic() - self.taken_at)


class WorkerBroken(Exception):
    """Every attempt in a pool got an answer that is not HTTP: a 502, unlike an unreachable pool."""


class Upstream:
    def __init__(self, client: WorkerClient, router: Router, metrics: Metrics) -> None:
        """`client`: the app's one worker client (the monitor's probes and scrapes share it);
        `aclose` closes it."""
        self._router = router
        self._metrics = metrics
        self._client = client

    async def aclose(self) -> None:
        await self._client.aclose()

    async def call_endpoint(
        self,
        method: str,
        url: str,
        *,
        body: bytes | None,
        headers: Mapping[str, str],
        connect_s: float,
        total_s: float,
        max_bytes: int,
    ) -> SmallAnswer:
        """One short call to one chosen endpoint, outside the request pipeline (a stored response
        read back, a token count): bounded in time and size, never redirected, never sent twice
        once the worker may have read it, every failure a GatewayError."""
        try:
            async with asyncio.timeout(total_s):
                return await self._client.fetch(
                    method, url, body or b"", headers, connect_s=connect_s, max_bytes=max_bytes
                )
        except TimeoutError:
            raise GatewayError(ErrorCode.UPSTREAM_TIMEOUT, "The worker did not answer in time.") from None
        except TooLarge:
            raise GatewayError(
                ErrorCode.UPSTREAM_ERROR, "The worker's answer is larger than the gateway relays."
            ) from None
        except Unreachable:
            raise GatewayError(
                ErrorCode.NO_HEALTHY_UPSTREAM,
                "The worker could not be reached.",
                headers={"retry-after": "1"},
            ) from None
        except (WorkerHttpError, ValueError):
            raise GatewayError(
                ErrorCode.UPSTREAM_ERROR, "The worker answered with a malformed response."
            ) from None

    async def open(
        self,
        pools: Sequence[Pool],
        path: str,
        body_for: Callable[[Pool], bytes],
        headers: Mapping[str, str],
        route: RouteRequest,
        *,
        head_deadline: float,
        stream: bool,
        attempt_failures: list[tuple[str, str]] | None = None,
        trace: RequestTrace | None = None,
    ) -> UpstreamResponse:
        """Returns once a worker has sent its status line and headers, before `head_deadline`
        (event-loop time). The caller must `release()` or `close()` the result.

        `stream`: the caller reports the health verdict itself once the first event arrives.
        `attempt_failures`: (model, reason) of each failed attempt is added there, for the
        request's settlement to count once the request ends.
        `trace`: the request's spans, when traced: a queue wait and each attempt get one, and the
        worker's traceparent names its attempt's span."""
        failures: list[str] = []
        # The soonest any pool tried may take requests again: the client's retry-after.
        retry_s: float | None = None
        broken: WorkerBroken | None = None
        requested = pools[0].model.name if pools else route.model
        for i, pool in enumerate(pools):
            if i and pool.model.name != pools[i - 1].model.name and pool.model.name != requested:
                self._metrics.fallbacks.labels(requested, pool.model.name).inc()
            last = i == len(pools) - 1
            try:
                return await self._open_pool(
                    pool,
                    path,
                    body_for(pool),
                    headers,
                    route,
                    head_deadline,
                    stream=stream,
                    last=last,
                    failures=[] if attempt_failures is None else attempt_failures,
                    trace=trace,
                )
            except PoolUnavailable as exc:
                failures.append(str(exc))
                # None: nothing is scheduled, its endpoints may take the very next request.
                chance = 0.0 if exc.retry_after_s is None else exc.retry_after_s
                retry_s = chance if retry_s is None else min(retry_s, chance)
            except WorkerBroken as exc:
                broken = broken or exc
        if broken is not None:
            raise GatewayError(ErrorCode.UPSTREAM_ERROR, str(broken))
        raise GatewayError(
            ErrorCode.NO_HEALTHY_UPSTREAM,
            f"No worker for model '{requested}' is available: {'; '.join(failures) or 'no pool'}.",
            headers={"retry-after": retry_after(retry_s)},
        )

    async def _open_pool(
        self,
        pool: Pool,
        path: str,
        body: bytes,
        headers: Mapping[str, str],
        route: RouteRequest,
        head_deadline: float,
        *,
        stream: bool,
        last: bool,
        failures: list[tuple[str, str]],
        trace: RequestTrace | None,
    ) -> UpstreamResponse:
        model = pool.model
        loop = asyncio.get_running_loop()
        tried: list[Endpoint] = []
        bad_answers = 0
        last_failure = "no endpoint is configured"
        for attempt in range(_ATTEMPTS_PER_POOL):
            if attempt:
                self._metrics.upstream_retries.labels(pool.name).inc()
            wait = min(model.routing.max_queue_wait, max(head_deadline - loop.time(), 0.0))
            # The prefix index hears of the pick only once the worker accepted the request.
            picked: list[RouteRequest] = []
            try:
                # A free slot at once, else a wait in the pool's queue: the wait is a span of its own.
                got = pool.try_acquire(route, self._router.rng, tried, picked)
                if got is None and route.no_wait:
                    raise GatewayError(
                        ErrorCode.POOL_SATURATED,
                        f"Every worker for model '{model.name}' is busy; a batch line does not queue.",
                    )
                if got is None:
                    with tracing.phase(trace, "queue wait"):
                        got = await pool.acquire(route, self._router.rng, tried, wait, picked)
                endpoint, trial = got
                taken_at = time.monotonic()
            except PoolUnavailable:
                if tried:
                    break
                raise
            tried.append(endpoint)
            handed_over = False
            verdict = NO_VERDICT  # also when the client leaves while it waits
            request_failed = Verdict(VerdictKind.REQUEST_FAILED, route.team)
            span, sent = None, headers
            if trace is not None:
                span = trace.attempt(pool.wire_model, pool.name, endpoint.url)
                sent = trace.worker_headers(headers, span)
            try:
                async with asyncio.timeout_at(head_deadline):
                    # A redirect is never followed (the client has no redirects): see below.
                    response = await self._client.post(
                        endpoint.url, path, body, sent, connect_s=model.timeouts.connect
                    )
                if span is not None:
                    tracing.head(span, response.status)
                if response.status >= 500 or 300 <= response.status < 400:
                    # A 5xx may be this request's doing; a redirect no request can ask for.
                    verdict = request_failed if response.status >= 500 else ENDPOINT_FAILED
                    final = last and attempt + 1 == _ATTEMPTS_PER_POOL
                    if response.status in _RETRYABLE_STATUS and not final:
                        failures.append((model.name, Failure.STATUS.label(response.status)))
                        last_failure = f"a worker answered {response.status}"
                        log.warning(
                            "upstream failed model=%s endpoint=%s reason=status_%d",
                            model.name,
                            endpoint.url,
                            response.status,
                        )
                        response.release()
                        continue
                handed_over = True
                if response.status < 300 and picked:
                    pool.accepted(picked[-1], endpoint)
                upstream = UpstreamResponse(
                    pool, endpoint, response, trial, team=route.team, taken_at=taken_at
                )
                is_stream = stream and response.status == 200 and response.is_event_stream()
                if route.share is not None and route.share.deadline is not None:
                    upstream.deadline = route.share.deadline
                    if not is_stream:
                        upstream.first_output()
                if not is_stream:
                    upstream.report(SERVED if verdict is NO_VERDICT else verdict)
                if trace is not None and span is not None:
                    trace.answering(span)  # ends with the answer, not here
                return upstream
            except WorkerHttpError as exc:
                # Unreachable (a connect that failed or timed out is worth a retry), or a response
                # head that is not HTTP (a bad status line, an oversized head, a content-length
                # that is not a number): the worker is broken, not unreachable, and that is a 502
                # once every attempt has failed so. A connect that failed for want of this
                # process's own descriptors or ports says nothing of the worker.
                verdict = NO_VERDICT if isinstance(exc, LocalExhaustion) else ENDPOINT_FAILED
                unreachable = isinstance(exc, Unreachable)
                reason = Failure.CONNECT if unreachable else Failure.BAD_RESPONSE
                bad_answers += 0 if unreachable else 1
                failures.append((model.name, reason))
                if span is not None:
                    tracing.failed(span, reason)
                # The client reads this (through PoolUnavailable): no URL, the log line has it.
                last_failure = "a worker could not be reached" if unreachable else "a worker answered garbage"
                log.warning(
                    "upstream failed model=%s endpoint=%s reason=%s error=%s",
                    model.name,
                    endpoint.url,
                    reason,
                    type(exc).__name__,
                )
                if isinstance(exc, Unanswered | WrongAnswer):
                    # The worker read the request, or may have: it is sent to no worker again (a
                    # stored Responses call must not be made twice).
                    raise GatewayError(ErrorCode.UPSTREAM_ERROR, _not_sent_again(model.name, exc)) from None
            except TimeoutError:
                # The head deadline is the request's own (first_token, or total for a long
                # generation): one team's slow requests are not the endpoint's fault alone.
                verdict = request_failed
                failures.append((model.name, Failure.TIMEOUT))
                if span is not None:
                    tracing.failed(span, Failure.TIMEOUT)
                raise GatewayError(
                    ErrorCode.UPSTREAM_TIMEOUT,
                    f"The worker for model '{model.name}' did not answer in time.",
                ) from None
            finally:
                # Also on cancellation (the client left): the slot must not leak.
                if not handed_over:
                    pool.report(endpoint, verdict, trial=trial)
                    pool.release(endpoint)
                    if span is not None:
                        span.end()
        if bad_answers:
            raise WorkerBroken(f"The worker for model '{model.name}' answered with a malformed response.")
        raise PoolUnavailable(f"pool '{pool.name}': {last_failure}", pool.next_chance_s())


def _not_sent_again(model: str, exc: WorkerHttpError) -> str:
    if isinstance(exc, Unanswered):
        return f"The worker for model '{model}' closed the connection without answering."
    return f"The worker for model '{model}' answered with a response the gateway does not serve: {exc}."
