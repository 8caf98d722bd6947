"""The call to an overflow provider: the body a translated worker gets (the chat contract), cut down
to OpenAI's own Chat Completions fields, with the provider's key and nothing else of ours.

What crosses the trust boundary, and what does not:
- the body: only `_FIELDS` (no `cache_salt`, no engine field a model file admits, no `user`,
  `metadata` or `store`: the provider keeps nothing for us), the provider's model name, and for a
  stream `stream_options: {"include_usage": true}` alone (its usage is the metering);
- the headers: the provider's key as a Bearer token, the content type, what is accepted. No
  client header, no request id, traceparent, team, key or forwarding header;
- back to the client: a 200's answer, relayed and metered as a worker's; any other status is
  never relayed. A refusal of the request itself (400, 413, 422) is the client's 400; anything
  else (401, 403, 404, 429, a quota, 5xx, a redirect, garbage, no answer by the head deadline) is
  the provider's failure, counted on its breaker, and the client's 503 `overflow_unavailable`
  with a `retry-after`: the platform's capacity failed, not the client's limit.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any

import orjson

from gateway.errors import ErrorCode, GatewayError
from gateway.observability.metrics import Metrics
from gateway.overflow.providers import ModelOverflow, Overflow, Provider
from gateway.proxy.upstream import UpstreamResponse
from gateway.proxy.worker_protocols import CHAT
from gateway.routing.health import ENDPOINT_FAILED, NO_VERDICT, SERVED, Verdict
from gateway.routing.policy import RouteRequest
from gateway.routing.unavailable import PoolUnavailable, retry_after
from gateway.worker.client import WorkerClient
from gateway.worker.http import LocalExhaustion, Unreachable, WorkerHttpError

if TYPE_CHECKING:
    from gateway.proxy.dialect import Call
    from gateway.routing.stored_responses import Holder

log = logging.getLogger("sluicegate.overflow")

CHAT_PATH = "/v1/chat/completions"
SERVED_BY_HEADER = "x-sluicegate-served-by"
_PROVIDER_PATH = "/chat/completions"  # after the provider's base URL (`https://host/v1`)
# OpenAI's Chat Completions request fields, which any OpenAI-compatible provider takes.
_FIELDS = frozenset(
    {
        "messages",
        "max_tokens",
        "max_completion_tokens",
        "temperature",
        "top_p",
        "n",
        "stream",
        "stop",
        "presence_penalty",
        "frequency_penalty",
        "logit_bias",
        "logprobs",
        "top_logprobs",
        "seed",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "response_format",
        "reasoning_effort",
    }
)
# The client's own refusal: the provider works, the request is what it would not take.
_CLIENT_STATUSES = frozenset({400, 413, 422})
_MAX_RETRY_AFTER_S = 3600


def provider_body(worker_body: bytes, model: str, *, stream: bool) -> bytes:
    """The chat contract's body as a provider gets it."""
    payload: dict[str, Any] = orjson.loads(worker_body)
    body = {name: value for name, value in payload.items() if name in _FIELDS}
    body["model"] = model
    if stream:
        body["stream_options"] = {"include_usage": True}
    return orjson.dumps(body)


def overflow_of(overflow: Overflow, call: Call, model: str, holder: Holder | None) -> ModelOverflow | None:
    """The model's overflow, for a request in the chat contract that continues nothing."""
    if holder is not None or call.protocol is not CHAT:
        return None
    if call.worker_path != CHAT_PATH:
        return None
    return overflow.of(model)


class ProviderResponse(UpstreamResponse):
    """A provider's answer, judged at its end rather than at its first output as a worker's is
    (the pipeline reports it: Provider.served or failed): a provider that breaks every stream
    after one token would otherwise be a success each time, and its breaker never open."""

    __slots__ = ()

    def served(self) -> None:
        if self.deadline is not None:
            self.first_output()


class OverflowCall:
    def __init__(self, client: WorkerClient, metrics: Metrics) -> None:
        self._client = client
        self._metrics = metrics

    async def open_call(
        self, provider: Provider, call: Call, max_tokens: int | None, team: str, head_deadline: float
    ) -> UpstreamResponse:
        """`open` with the chat contract's call (gateway.proxy.dialect) as the provider gets it: its
        model's name there, and never the team's cache salt (a provider is outside the trust
        boundary)."""
        wire = provider.pool.wire_model
        body = call.worker_body(wire, continuous_usage=False, max_tokens=max_tokens, cache_salt=None)
        return await self.open(
            provider,
            provider_body(body, wire, stream=call.stream),
            team=team,
            head_deadline=head_deadline,
            stream=call.stream,
        )

    async def open(
        self, provider: Provider, body: bytes, *, team: str, head_deadline: float, stream: bool
    ) -> UpstreamResponse:
        """The provider's answer once its head is here, a 200 (the caller releases or closes it);
        every other outcome raises the GatewayError the client gets."""
        pool, endpoint = provider.pool, provider.endpoint
        try:
            got = pool.try_acquire(RouteRequest(pool.model.name, team=team), provider.rng)
        except PoolUnavailable:
            got = None
        if got is None:  # taken since the decision, or its breaker opened meanwhile
            raise self._unavailable(provider, team, "is at capacity", None)
        endpoint, trial = got
        taken_at = time.monotonic()
        verdict: Verdict = NO_VERDICT
        handed_over = False
        try:
            try:
                async with asyncio.timeout_at(head_deadline):
                    response = await self._client.post(
                        provider.url,
                        _PROVIDER_PATH,
                        body,
                        provider.headers(),
                        connect_s=pool.model.timeouts.connect,
                    )
            except TimeoutError:
                verdict = ENDPOINT_FAILED
                raise self._unavailable(provider, team, "did not answer in time", None) from None
            except WorkerHttpError as exc:
                verdict = NO_VERDICT if isinstance(exc, LocalExhaustion) else ENDPOINT_FAILED
                why = "could not be reached" if isinstance(exc, Unreachable) else "answered garbage"
                raise self._unavailable(provider, team, why, None) from None
            status = response.status
            if status == 200:
                handed_over = True
                # No verdict yet: it comes once the answer is read whole, or the stream ended
                # (ProviderResponse). A success at the head or the first token would reset the
                # failures in a row that 200s of garbage or broken streams add.
                upstream = ProviderResponse(pool, endpoint, response, trial, team=team, taken_at=taken_at)
                self._metrics.overflow_requests.labels(provider.label, team, "served").inc()
                return upstream
            wait = response.headers.get("retry-after")
            response.close()  # its body is never read: the provider's words stay there
            if status in _CLIENT_STATUSES:
                verdict = SERVED
                raise GatewayError(
                    ErrorCode.INVALID_REQUEST,
                    f"The overflow provider refused the request (HTTP {status}); check its parameters.",
                )
            verdict = ENDPOINT_FAILED
            raise self._unavailable(provider, team, f"answered HTTP {status}", wait)
        finally:
            if not handed_over:  # also when the client left meanwhile: the slot must not leak
                pool.report(endpoint, verdict, trial=trial)
                pool.release(endpoint)

    def _unavailable(self, provider: Provider, team: str, why: str, wait: str | None) -> GatewayError:
        self._metrics.overflow_requests.labels(provider.label, team, "unavailable").inc()
        log.warning("overflow provider failed provider=%s reason=%s", provider.label, why)
        seconds = provider.retry_after_s()
        wait = None if wait is None else wait.strip()
        # ASCII first: `²` (latin-1 0xb2) is a digit to isdigit() and not to int().
        if wait is not None and wait.isascii() and wait.isdigit() and len(wait) <= 6:
            seconds = max(seconds or 0.0, float(min(int(wait), _MAX_RETRY_AFTER_S)))
        return GatewayError(
            ErrorCode.OVERFLOW_UNAVAILABLE,
            f"The model's workers are busy and its overflow provider '{provider.name}' {why}; try again "
            "shortly.",
            headers={"retry-after": retry_after(seconds)},
        )
