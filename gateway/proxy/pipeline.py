"""One API request, top to bottom:

    authenticate -> parse -> resolve the model -> find what it continues -> admit (limits)
    -> route -> relay -> finish

Everything before admission can refuse the request with an error and nothing to undo. From
admission on, a `Settlement` owns the request, and `finish()` in the `finally` below settles it
exactly once, whatever happens: that is the only place usage is metered, limits are settled and
the in-flight gauge goes down. What is specific to one client API (its body, its stream, its
error envelope) comes from the `Dialect`; the worker side is the same for all of them. Steps told
in their own modules are called from here in order: the parse (gateway.proxy.parsing), what the
call continues (gateway.proxy.remembering), the route and the worker's body
(gateway.proxy.worker_plan), an overflow provider's call (gateway.overflow) and a whole answer's
relay (gateway.proxy.whole_answer; a stream's is gateway.proxy.relay).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from starlette.requests import ClientDisconnect, Request
from starlette.types import Receive, Scope, Send

from gateway.config import Settings
from gateway.drain import Drain
from gateway.errors import ErrorCode, Failure, GatewayError
from gateway.http.body import read_body
from gateway.http.context import CLIENT_CLOSED, RequestContext
from gateway.limits.limiter import RateLimiter
from gateway.limits.plans import LimitPlans
from gateway.limits.spec import overflow_allowed
from gateway.observability import tracing
from gateway.observability.metrics import Metrics
from gateway.overflow import decision
from gateway.overflow.call import SERVED_BY_HEADER, OverflowCall, overflow_of
from gateway.overflow.contract import PROVIDER_CHAT
from gateway.overflow.providers import Overflow
from gateway.proxy import parsing, whole_answer, worker_plan
from gateway.proxy.admitted import Admitted
from gateway.proxy.answer_bytes import AnswerBytes
from gateway.proxy.cache_salt import CacheSalts
from gateway.proxy.dialect import Dialect
from gateway.proxy.disconnect import ClientWatch, client_abort
from gateway.proxy.forwarding import Forwarding
from gateway.proxy.gate import Gate
from gateway.proxy.output_caps import OutputCaps
from gateway.proxy.relay import STREAM_HEADERS, StreamRelay
from gateway.proxy.remembering import Remembering, continued
from gateway.proxy.settlement import Settlement, Submitter
from gateway.proxy.translation import ignored, model_rules
from gateway.proxy.translation.bounds import BodyBounds, BodyLists
from gateway.proxy.upstream import Upstream
from gateway.proxy.worker_protocols import CHAT
from gateway.routing import share
from gateway.routing.deadline import DEADLINE_HEADER, deadline_ms
from gateway.routing.router import Router
from gateway.routing.stored_responses import StoredResponses

# Names the model that answered: the one asked for, or the fallback that stood in for it.
MODEL_HEADER = "x-sluicegate-model"
# The routing headers _admit reads (as the ASGI scope holds their names).
_PRIORITY = share.PRIORITY_HEADER.encode()
_DEADLINE = DEADLINE_HEADER.encode()


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
            share=admitted.share_ticket(),
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
        holder = await continued(self._stored, call.continues, principal.team_id, ctx.model)
        salt = await self._salts.scope(principal.team_id, key.id, call.client_salt)
        price = requested.model.price
        if ctx.batch and price is not None:
            price = price.batched()
        # Inline: no call at all on the path of a gateway without overflow (tests/perf/budget.json).
        # A batch line runs on idle capacity only, never on a provider.
        overflow = (
            None
            if self._overflow is None or ctx.batch
            else overflow_of(self._overflow[0], call, requested.model.name, holder)
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
        plan, route = worker_plan.route(self._router, admitted, dialect.name, ctx, settlement.share)
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
                upstream = await self._overflow[1].open_call(
                    provider, call, admitted.cap.per_answer, ctx.team, head_deadline
                )
            else:
                upstream = await self._upstream.open(
                    plan,
                    call.worker_path,
                    lambda pool: worker_plan.worker_body(
                        call, pool, admitted.cap.per_answer, admitted.salt, ctx.batch
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
            None
            if call.protocol is CHAT
            else Remembering.of(self._stored, team_id, upstream, settlement, answer_name)
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
