"""One API request, top to bottom:

    authenticate -> parse -> resolve the model -> find what it continues -> admit (limits)
    -> route -> relay -> finish

Everything before admission can refuse the request with an error and nothing to undo. From
admission on, a `Settlement` owns the request, and `finish()` in the `finally` below settles it
exactly once, whatever happens: that is the only place usage is metered, limits are settled and
the in-flight gauge goes down. What is specific to one client API (its body, its stream, its
error envelope) comes from the `Dialect`; the worker side is the same for all of them. Two steps
are told in their own modules, called from here in order: the parse (gateway.proxy.parsing) and
a whole answer's relay (gateway.proxy.whole_answer; a stream's is gateway.proxy.relay).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import orjson
from starlette.requests import ClientDisconnect, Request
from starlette.types import Receive, Scope, Send

from gateway.config import Settings
from gateway.drain import Drain
from gateway.errors import ErrorCode, Failure, GatewayError
from gateway.http.body import read_body
from gateway.http.context import CLIENT_CLOSED, RequestContext
from gateway.keys.auth import Principal
from gateway.limits.admission import Admission
from gateway.limits.limiter import RateLimiter
from gateway.limits.output import OutputCap
from gateway.limits.plans import LimitPlans
from gateway.limits.spec import overflow_allowed
from gateway.observability import tracing
from gateway.observability.metrics import Metrics
from gateway.overflow import decision
from gateway.overflow.call import CHAT_PATH, SERVED_BY_HEADER, OverflowCall, provider_body
from gateway.overflow.contract import PROVIDER_CHAT
from gateway.overflow.providers import ModelOverflow, Overflow
from gateway.pricing import Price
from gateway.proxy import parsing, whole_answer
from gateway.proxy.answer_bytes import AnswerBytes
from gateway.proxy.cache_salt import CacheSalts, SaltScope
from gateway.proxy.dialect import Call, Dialect
from gateway.proxy.disconnect import ClientWatch, client_abort
from gateway.proxy.forwarding import Forwarding
from gateway.proxy.gate import Gate
from gateway.proxy.output_caps import OutputCaps
from gateway.proxy.relay import STREAM_HEADERS, StreamRelay
from gateway.proxy.remembering import Remembering
from gateway.proxy.settlement import Settlement, Submitter
from gateway.proxy.translation import ignored, model_rules
from gateway.proxy.translation.bounds import BodyBounds, BodyLists
from gateway.proxy.translation.engine_priority import with_engine_priority
from gateway.proxy.upstream import Upstream, UpstreamResponse
from gateway.proxy.worker_protocols import CHAT
from gateway.routing import share
from gateway.routing.deadline import DEADLINE_HEADER, deadline_ms
from gateway.routing.policy import RouteRequest
from gateway.routing.pool import Pool
from gateway.routing.prefix import body_blocks
from gateway.routing.router import ModelRoute, Router
from gateway.routing.share import ShareTicket
from gateway.routing.stored_responses import Holder, StoredResponses

# Names the model that answered: the one asked for, or the fallback that stood in for it.
MODEL_HEADER = "x-sluicegate-model"
# The routing headers _admit reads (as the ASGI scope holds their names).
_PRIORITY = share.PRIORITY_HEADER.encode()
_DEADLINE = DEADLINE_HEADER.encode()


@dataclass(frozen=True, slots=True)
class Admitted:
    """A request that passed every check before the worker."""

    call: Call
    principal: Principal
    requested: ModelRoute
    admission: Admission
    holder: Holder | None  # where what the call continues is kept
    cap: OutputCap  # what the worker may generate per answer: what admission granted
    salt: SaltScope  # the worker's cache_salt, per pool (gateway.proxy.cache_salt)
    # The prompt's estimate with the history of the conversation it continues: what the worker
    # prefills, so what is reserved, and billed when the worker reports no usage.
    prompt_estimate: int
    priority: int  # its band in a saturated pool (gateway/routing/share.py)
    deadline: float | None  # when its first token must come by, time.monotonic() (routing/deadline.py)
    # The model's overflow when this request is one that could take it (gateway/overflow/), and
    # whether its team and key allow it: then its money was reserved at the higher price.
    overflow: ModelOverflow | None = None
    overflow_allowed: bool = False
    price: Price | None = None  # the model's, with its batch multiplier for a batch line


class Pipeline:
    def __init__(
        self,
        *,
        settings: Settings,
        gate: Gate,
        limiter: RateLimiter,
        router: Router,
        upstream: Upstream,
        meter: Submitter,
        metrics: Metrics,
        forwarding: Forwarding,
        stored: StoredResponses,
        drain: Drain,
        salts: CacheSalts,
        hosted_tools: frozenset[str] = frozenset(),
        body_lists: Mapping[str, BodyLists] | None = None,
        overflow: tuple[Overflow, OverflowCall] | None = None,
    ) -> None:
        """What the client APIs declare (gateway.apis), handed down by the app: `hosted_tools`,
        the hosted tool types, metric labels of what a translation dropped; `body_lists`, per
        dialect name, the list fields of its bodies the item bound counts. `overflow`: the models'
        external providers and the call to them (gateway/overflow/), when any model has some."""
        self._settings = settings
        self._bounds = BodyBounds(
            settings.max_messages, settings.max_content_parts, settings.max_tools, settings.max_body_values
        )
        # Per dialect: the settings' bounds over its API's lists (a dialect not named: none counted).
        self._dialect_bounds = {
            name: replace(self._bounds, lists=lists) for name, lists in (body_lists or {}).items()
        }
        # Whole answers held at once, across every request of this replica (a 503 past it).
        self._answers = answers = AnswerBytes(settings.max_buffered_answer_bytes)
        metrics.buffered_answer_bytes.set_function(lambda: answers.held)
        self._hosted_tools = hosted_tools
        self._drain = drain
        self._stored = stored
        self._salts = salts
        self._forwarding = forwarding
        self._gate = gate
        self._limiter = limiter
        self._router = router
        self._upstream = upstream
        self._caps = OutputCaps(upstream, settings.default_max_tokens)
        self._plans = LimitPlans()
        self._meter = meter
        self._metrics = metrics
        self._overflow = overflow

    async def serve(self, dialect: Dialect[Any], scope: Scope, receive: Receive, send: Send) -> None:
        ctx = RequestContext.of(scope)
        ctx.api = "batch" if ctx.batch else dialect.name
        try:
            await self._serve(dialect, ctx, scope, receive, send)
        except asyncio.CancelledError:
            if not self._drain.absorbed():
                raise
            # Cut by the drain before its answer began (a begun stream ends itself in the relay).
            if ctx.status == 0:
                cut = self._drain.error()
                ctx.answered_with(cut)
                await dialect.error_response(cut)(scope, receive, send)

    async def _serve(
        self, dialect: Dialect[Any], ctx: RequestContext, scope: Scope, receive: Receive, send: Send
    ) -> None:
        try:
            admitted = await self._admit(dialect, Request(scope, receive), ctx)
        except GatewayError as error:
            ctx.answered_with(error)
            await dialect.error_response(error)(scope, receive, send)
            return
        except ClientDisconnect:
            ctx.status, ctx.outcome = CLIENT_CLOSED, "disconnected"  # left while sending its body
            return
        settlement = Settlement(
            ctx,
            admitted.admission,
            admitted.prompt_estimate,
            self._metrics,
            self._meter,
            share=self._share_ticket(admitted),
            price=admitted.price,
        )
        try:
            await self._answer(dialect, admitted, settlement, scope, receive, send)
        except GatewayError as error:
            # Only raised before the answer began: the relay ends a begun stream itself.
            settlement.outcome.failed = True
            error.headers.update({**dialect.limit_headers(admitted.admission), **admitted.cap.headers()})
            ctx.answered_with(error)
            await dialect.error_response(error)(scope, receive, send)
        except BaseException:
            settlement.outcome.failed = True  # a bug, or cancelled at shutdown
            raise
        finally:
            with tracing.settling(ctx.trace, settlement.outcome):
                settlement.finish()

    async def _admit(self, dialect: Dialect[Any], request: Request, ctx: RequestContext) -> Admitted:
        principal = await self._gate.caller(request, ctx)
        key = principal.key
        team = principal.team_limits
        # Both routing headers in one pass, inline: every request runs this (tests/perf/budget.json).
        priority_header = deadline_header = None
        for name, value in request.scope["headers"]:
            if name == _PRIORITY and priority_header is None:
                priority_header = str(value.decode("latin-1"))
            elif name == _DEADLINE and deadline_header is None:
                deadline_header = str(value.decode("latin-1"))
        deadline = None
        # Checked before the body is read or anything admitted: a bad header is the client's 400.
        if deadline_header is not None or key.limits.default_deadline_ms or team.default_deadline_ms:
            ms = deadline_ms(deadline_header, key.limits.default_deadline_ms, team.default_deadline_ms)
            if ms is not None:  # counted from the request's arrival
                deadline = time.monotonic() - (time.perf_counter() - ctx.started) + ms / 1000
        body = await read_body(request, self._settings.max_body_bytes, self._settings.body_timeout_s)
        call = parsing.parse(
            dialect,
            body,
            self._router.native_models(dialect.name),
            ctx,
            request,
            self._dialect_bounds.get(dialect.name, self._bounds),
        )
        requested = self._gate.model(key, call.model, ctx)
        call = model_rules.apply(call, requested.model)  # native_normalise, hosted_tools
        ignored.record(ctx, dialect.name, call.ignored, self._metrics, self._hosted_tools)
        holder = await self._holder(call.continues, principal.team_id, ctx.model)
        salt = await self._salts.scope(principal.team_id, key.id, call.client_salt)
        price = requested.model.price
        if ctx.batch and price is not None:
            price = price.batched()
        # Inline: no call at all on the path of a gateway without overflow (tests/perf/budget.json).
        # A batch line runs on idle capacity only, never on a provider.
        overflow = (
            None
            if self._overflow is None or ctx.batch
            else self._overflow_of(call, requested.model.name, holder)
        )
        may_overflow = overflow is not None and overflow_allowed(team, key.limits)
        planned = self._plans.plan(
            key.team,
            principal.team_limits,
            key.id,
            key.limits,
            ctx.model,
            dt.datetime.now(dt.UTC),
            # In the same round trip: money at the higher of the model's and its providers' prices.
            overflow.ceiling if may_overflow and overflow is not None else price,
        )
        history = 0 if holder is None else holder.tokens
        prompt = call.estimated_prompt_tokens() + history
        cap = await self._caps.before_admission(call, requested, history)
        reservation = cap.reservation(prompt)
        with tracing.phase(ctx.trace, "admit"):
            admission = await self._limiter.admit(
                key.team, planned, ctx.request_id, reservation, least=cap.least, step=cap.answers or 1
            )
            if not admission.allowed:
                self._metrics.rate_limited.labels(ctx.model, key.team, *admission.refusal_labels()).inc()
                ctx.refused_by = admission.refusal_labels()
                error = admission.error()
                error.headers.update(dialect.limit_headers(admission))
                raise error
        capped = cap.admitted(admission)
        priority = share.band(key.limits.priority, team.priority, priority_header)
        return Admitted(
            call,
            principal,
            requested,
            admission,
            holder,
            capped,
            salt,
            prompt,
            priority,
            deadline,
            overflow,
            may_overflow,
            price,
        )

    def _overflow_of(self, call: Call, model: str, holder: Holder | None) -> ModelOverflow | None:
        """The model's overflow, for a request in the chat contract that continues nothing."""
        if self._overflow is None or holder is not None or call.protocol is not CHAT:
            return None
        if call.worker_path != CHAT_PATH:
            return None
        return self._overflow[0].of(model)

    def _share_ticket(self, admitted: Admitted) -> ShareTicket:
        """The request's weight in a saturated pool's token fair share, from what it reserved."""
        estimate = admitted.admission.reservation
        return ShareTicket.estimated(
            admitted.principal.key.team,
            admitted.principal.team_limits.share_weight,
            admitted.priority,
            estimate.prompt_tokens,
            estimate.completion_tokens,
            admitted.deadline,
        )

    async def _holder(self, response_id: str | None, team_id: str, model: str) -> Holder | None:
        """The endpoint holding the response a request continues. Another team's response (a
        deleted team's too, whose name a new team took) is a 404 like one that never existed: a
        key learns nothing about other teams' ids."""
        if response_id is None:
            return None
        holder = await self._stored.find(response_id)
        if holder is None or holder.team != team_id:
            raise GatewayError(
                ErrorCode.NOT_FOUND,
                f"No stored response with id '{response_id}'.",
                param="previous_response_id",
            )
        if holder.model != model:
            raise GatewayError(
                ErrorCode.INVALID_REQUEST,
                f"The response '{response_id}' was made by another model; continue it with "
                f"'{holder.answer_name}'.",
                param="previous_response_id",
            )
        return holder

    def _plan(self, admitted: Admitted, api: str) -> list[Pool]:
        holder = admitted.holder
        if holder is not None:
            pool = self._router.pool(holder.pool)
            if pool is None or pool.get(holder.endpoint) is None:
                raise GatewayError(
                    ErrorCode.NOT_FOUND,
                    "The worker that stored the previous response is gone.",
                    param="previous_response_id",
                )
            return [pool]
        native = admitted.call.protocol is not CHAT
        return self._router.plan(admitted.requested, native_api=api if native else None)

    async def _answer(
        self,
        dialect: Dialect[Any],
        admitted: Admitted,
        settlement: Settlement,
        scope: Scope,
        receive: Receive,
        send: Send,
    ) -> None:
        """Route and relay. The queue wait for a saturated pool and the wait for the worker's
        answer are both cut short by a client that leaves."""
        call, model = admitted.call, admitted.requested.model
        ctx, outcome = settlement.ctx, settlement.outcome
        loop = asyncio.get_running_loop()
        head_deadline = loop.time() + (model.timeouts.first_token if call.stream else model.timeouts.total)
        plan = self._plan(admitted, dialect.name)
        blocks, block_bytes = _prompt_blocks(call, plan, admitted.cap.per_answer, admitted.salt)
        route = RouteRequest(
            model=model.name,
            user=call.user,
            session_id=ctx.session_id,
            team=ctx.team,
            share_weight=admitted.principal.team_limits.share_weight,
            pinned=None if admitted.holder is None else admitted.holder.endpoint,
            share=settlement.share,
            blocks=blocks,
            block_bytes=block_bytes,
            no_wait=ctx.batch,
        )
        # Pools and fallbacks first; an overflow provider only when none can serve in time.
        provider = (
            None
            if admitted.overflow is None
            else decision.choose(
                admitted.overflow,
                plan,
                route,
                allowed=admitted.overflow_allowed,
                deadline=admitted.deadline,
                metrics=self._metrics,
            )
        )
        if provider is not None:
            # Its usage costs the provider's prices; the log, the span and the usage row say who
            # served it (or failed to).
            settlement.price, ctx.served_by = provider.price, provider.served_by
        # One watch for the queue, the worker's head and a whole answer's body: a client that
        # leaves during any of them frees the worker (a stream's relay watches on its own).
        watch = ClientWatch(receive, scope)
        try:
            if provider is not None and self._overflow is not None:
                wire = provider.pool.wire_model
                upstream = await self._overflow[1].open(
                    provider,
                    provider_body(
                        call.worker_body(
                            # A provider outside the trust boundary never gets the team's salt.
                            wire,
                            continuous_usage=False,
                            max_tokens=admitted.cap.per_answer,
                            cache_salt=None,
                        ),
                        wire,
                        stream=call.stream,
                    ),
                    team=ctx.team,
                    head_deadline=head_deadline,
                    stream=call.stream,
                )
            else:
                upstream = await self._upstream.open(
                    plan,
                    call.worker_path,
                    lambda pool: _behind_interactive(
                        call.worker_body(
                            pool.wire_model,
                            continuous_usage=pool.model.continuous_usage,
                            max_tokens=admitted.cap.per_answer,
                            cache_salt=admitted.salt.for_model(pool.model.cache_isolation),
                        ),
                        pool,
                        background=ctx.batch,
                    ),
                    self._forwarding.worker_headers(scope, ctx),
                    route,
                    head_deadline=head_deadline,
                    stream=call.stream,
                    attempt_failures=outcome.attempt_failures,
                    trace=ctx.trace,
                )
            outcome.reached_worker = True
            ctx.endpoint, ctx.served_by_model = upstream.endpoint.url, upstream.pool.model.name
            if provider is not None:
                ctx.endpoint = ""  # served_by names it
            ctx.attempts = len(outcome.attempt_failures) + 1
            response = upstream.response
            streaming = call.stream and response.status == 200 and response.is_event_stream()
            body = (
                b""
                if streaming
                else await whole_answer.read(
                    upstream, model, head_deadline, self._answers, stream=call.stream
                )
            )
        except asyncio.CancelledError:
            if not watch.caught():
                raise  # someone else's cancellation (shutdown): not ours to swallow
            outcome.disconnected = True
            ctx.status = CLIENT_CLOSED
            return
        except GatewayError as error:
            if outcome.reached_worker:  # the answer broke off or timed out while being read
                timed_out = error.code is ErrorCode.UPSTREAM_TIMEOUT
                outcome.error_reason = Failure.ANSWER_TIMEOUT if timed_out else Failure.ANSWER_BROKEN
                if provider is not None and error.code is not ErrorCode.SERVER_BUSY:
                    provider.failed(trial=upstream.trial)  # not this replica's own memory bound
            raise
        finally:
            await watch.close()
        pool = upstream.pool
        answer_name = call.model if pool.model is model or provider is not None else pool.model.name
        headers = {
            **dialect.limit_headers(admitted.admission),
            **admitted.cap.headers(),
            MODEL_HEADER: pool.model.name,
        }
        if provider is not None:
            headers[SERVED_BY_HEADER] = provider.served_by
        team_id = admitted.principal.team_id
        remember = (
            None if call.protocol is CHAT else self._remembering(team_id, upstream, settlement, answer_name)
        )
        if streaming:
            relay = StreamRelay(
                upstream,
                dialect.stream(call, answer_name),
                outcome,
                headers=[*STREAM_HEADERS, *((k.encode(), v.encode()) for k, v in headers.items())],
                first_token_deadline=head_deadline,
                idle_timeout_s=model.timeouts.idle,
                stream_deadline=loop.time() + model.timeouts.stream_total,
                max_event_bytes=self._settings.max_event_bytes,
                abort_client=client_abort(scope),
                # A provider's error words stay with it; its usage never below what was relayed.
                protocol=call.protocol if provider is None else PROVIDER_CHAT,
                remember=remember,
                keepalive=dialect.keepalive,
                ping_interval_s=self._settings.stream_ping_interval_s,
                drain=self._drain,
                write_stall_s=self._settings.client_write_stall_s,
            )
            await relay.run(receive, send, scope)
            if provider is not None and outcome.error_reason is None and not outcome.disconnected:
                provider.served(trial=upstream.trial)  # a failure the relay reported itself
            if remember is not None:
                await remember.resize()  # the worker's final count, once the client has the end
            return
        try:
            await whole_answer.answer(
                dialect,
                call,
                upstream,
                body,
                settlement,
                answers=self._answers,
                requested=model,
                answer_name=answer_name,
                headers=headers,
                remember=remember,
                scope=scope,
                receive=receive,
                send=send,
            )
        except GatewayError:
            if provider is not None:
                provider.failed(trial=upstream.trial)  # a 200 that is no answer: on its breaker
            raise
        if provider is not None:
            provider.served(trial=upstream.trial)

    def _remembering(
        self, team_id: str, upstream: UpstreamResponse, settlement: Settlement, answer_name: str
    ) -> Remembering:
        """Writes down where a response the worker stored is held, and for which team (its id:
        a team re-created under the name is not its owner), before the client learns its id."""
        pool = upstream.pool
        holder = Holder(team_id, pool.model.name, answer_name, pool.name, upstream.endpoint.url)
        return Remembering(self._stored, holder, settlement)


def _behind_interactive(body: bytes, pool: Pool, *, background: bool) -> bytes:
    """A batch line's worker body with the engine priority of its pool's model, behind interactive
    requests in a vLLM that orders by it (gateway/proxy/translation/engine_priority.py). Only a
    batch line to such a model pays for the second encoding."""
    if not (background and pool.model.engine_priority):
        return body
    return orjson.dumps(with_engine_priority(orjson.loads(body), pool.model, background=True))


def _prompt_blocks(
    call: Call, plan: Sequence[Pool], cap: int | None, salt: SaltScope
) -> tuple[tuple[bytes, ...], int]:
    """The prompt's block hashes and their size, once per request, when a pool it may go to is
    routed by prefix (the first such: a fallback model's pools too, and those of another block
    size ignore them): from the body the worker gets, its cache_salt included, so hashed as the
    worker will see it and never predicting a hit across salts the engine will not give."""
    for pool in plan:
        if pool.prefix is not None:
            body = call.worker_body(
                pool.wire_model,
                continuous_usage=False,
                max_tokens=cap,
                cache_salt=salt.for_model(pool.model.cache_isolation),
            )
            return body_blocks(body, pool.prefix.block_bytes, call.protocol.prompt), pool.prefix.block_bytes
    return (), 0
