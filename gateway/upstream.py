"""Opening a request to a worker: pick an endpoint, connect, wait for the response head.

A connect failure, or a 502/503 before any byte of the answer, is retried once on another
endpoint of the pool: nothing was generated yet, so the retry cannot duplicate work the client
sees. Anything later is the relay's business.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass

import aiohttp

from gateway.errors import ErrorCode, GatewayError
from gateway.metrics import Metrics
from gateway.routing.policy import RouteRequest
from gateway.routing.pool import Endpoint, Pool, Router

log = logging.getLogger("sluicegate.upstream")

_RETRYABLE_STATUS = frozenset({502, 503})
_MAX_ATTEMPTS = 2


@dataclass(slots=True)
class UpstreamResponse:
    endpoint: Endpoint
    response: aiohttp.ClientResponse

    def release(self) -> None:
        """Give the endpoint's in-flight slot back and close the worker connection if unread."""
        self.endpoint.inflight -= 1
        self.response.release()


def new_session() -> aiohttp.ClientSession:
    connector = aiohttp.TCPConnector(limit=0, ttl_dns_cache=10, keepalive_timeout=30)
    return aiohttp.ClientSession(
        connector=connector,
        auto_decompress=False,
        skip_auto_headers=("User-Agent", "Accept-Encoding"),
        timeout=aiohttp.ClientTimeout(total=None),
    )


class Upstream:
    def __init__(self, session: aiohttp.ClientSession, router: Router, metrics: Metrics) -> None:
        self._session = session
        self._router = router
        self._metrics = metrics

    async def open(
        self,
        pool: Pool,
        path: str,
        body: bytes,
        headers: Mapping[str, str],
        route: RouteRequest,
        *,
        head_deadline: float,
    ) -> UpstreamResponse:
        """Returns once the worker has sent its status line and headers, before `head_deadline`
        (event-loop time). The caller must `release()` the result."""
        model = pool.model
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=model.timeouts.connect)
        tried: list[Endpoint] = []
        last_failure = "no endpoint is configured"
        for _ in range(_MAX_ATTEMPTS):
            endpoint = pool.pick(route, self._router.rng, exclude=tried)
            if endpoint is None:
                break
            tried.append(endpoint)
            endpoint.inflight += 1
            handed_over = False
            try:
                async with asyncio.timeout_at(head_deadline):
                    response = await self._session.post(
                        endpoint.url + path, data=body, headers=headers, timeout=timeout
                    )
                if response.status in _RETRYABLE_STATUS and len(tried) < _MAX_ATTEMPTS:
                    self._metrics.upstream_errors.labels(model.name, f"status_{response.status}").inc()
                    last_failure = f"{endpoint.url} answered {response.status}"
                    response.release()
                    continue
                handed_over = True
                return UpstreamResponse(endpoint, response)
            except (aiohttp.ClientConnectionError, aiohttp.ClientOSError) as exc:
                # Before TimeoutError: aiohttp's connect timeout is both, and is worth a retry.
                self._metrics.upstream_errors.labels(model.name, "connect").inc()
                last_failure = f"{endpoint.url} could not be reached ({type(exc).__name__})"
                log.warning(
                    "upstream connect failed model=%s endpoint=%s error=%s",
                    model.name,
                    endpoint.url,
                    type(exc).__name__,
                )
            except TimeoutError:
                self._metrics.upstream_errors.labels(model.name, "timeout").inc()
                raise GatewayError(
                    ErrorCode.UPSTREAM_TIMEOUT,
                    f"The worker for model '{model.name}' did not answer in time.",
                ) from None
            finally:
                # Also on cancellation (the client left): the slot must not leak.
                if not handed_over:
                    endpoint.inflight -= 1
        raise GatewayError(
            ErrorCode.NO_HEALTHY_UPSTREAM,
            f"No worker for model '{model.name}' is available: {last_failure}.",
            headers={"retry-after": "1"},
        )
