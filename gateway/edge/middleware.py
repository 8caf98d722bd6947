"""The one middleware: a request id on every request and response, then one access-log line and
the request metrics once the last byte has gone (so a stream is measured whole). It also refuses,
before routing, a path that hides a separator in percent-encoding, and, when tracing is on, opens
and ends an API request's SERVER span (gateway/observability/tracing.py)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.drain import Drain
from gateway.errors import ErrorCode, GatewayError
from gateway.http.context import RequestContext, client_request_id, new_request_id
from gateway.observability.logs import Fields, loggable, redact
from gateway.observability.metrics import UNKNOWN_MODEL, Metrics
from gateway.proxy.forwarding import Forwarding
from gateway.proxy.translation import ignored
from gateway.state import RequestState

access_log = logging.getLogger("sluicegate.access")
_QUIET_PATHS = frozenset({"/metrics", "/healthz", "/readyz"})
# Routing sees the decoded path, so `/admin%2Fv1/teams` or `/%61dmin/v1/teams` would reach
# `/admin/v1/teams` past an ingress rule that matches the raw `/admin/`. No route of the gateway
# needs percent-encoding, so any is refused...
# ...except in a model name, where an SDK encodes a `/` (`models.retrieve("org/model")`): behind
# the raw prefixes a client API declares (gateway.apis: `encoded_paths`), the decoded path can only
# reach its model routes, whatever follows.
# The text line: what it always said, the worker endpoint, then why a request was refused and
# who sent it (a value with a space or a quote is quoted, gateway/observability/logs.py). A JSON
# line carries every field.
_ACCESS_TEXT = (
    "request_id=%(request_id)s client_request_id=%(client_request_id)s api=%(api)s method=%(method)s "
    "path=%(path)s status=%(status)d duration_ms=%(duration_ms).1f model=%(model)s team=%(team)s "
    "key_id=%(key_id)s prompt_tokens=%(prompt_tokens)d completion_tokens=%(completion_tokens)d "
    "outcome=%(outcome)s endpoint=%(endpoint)s served_by=%(served_by)s requested_model=%(requested_model)s "
    "error=%(error)s param=%(param)s session=%(session)s user_agent=%(user_agent)s"
)
_MAX_CLIENT_TEXT = 256
# More than a key's length (`sk-sg-` and 43 characters).
_KEY_SLACK = 64


def _client_text(text: str) -> str | None:
    """Text a client chose, fit for a log line: bounded, escaped, any key in it redacted. The
    redaction comes before the bound: a key cut through would leave a piece its pattern no longer
    knows (a piece that starts past the slack is cut off whole)."""
    if not text:
        return None
    return redact(loggable(text[: _MAX_CLIENT_TEXT + _KEY_SLACK]))[:_MAX_CLIENT_TEXT]


class RequestContextMiddleware:
    def __init__(
        self,
        app: ASGIApp,
        metrics: Metrics,
        drain: Drain,
        forwarding: Forwarding | None = None,
        *,
        api_paths: Sequence[str] = (),
        encoded_paths: Sequence[bytes] = (),
        model_readers: Sequence[Callable[[str], str | None]] = (),
    ) -> None:
        """`api_paths`, `encoded_paths` and `model_readers`: the client APIs' (gateway.apis),
        handed down by the app: the path prefixes of their requests, which get the request
        metrics and a span; where a percent-encoded model name may come; and how an API that names
        the model in its path says which (the access log's `requested_model` when the body did
        not)."""
        self.app = app
        # One test per request: a prefix under another one adds nothing.
        self.api_paths = tuple(
            p for p in dict.fromkeys(api_paths) if not any(p != q and p.startswith(q) for q in api_paths)
        )
        self.metrics = metrics
        self.drain = drain
        self.forwarding = forwarding or Forwarding()  # who the client is, behind trusted proxies
        self.encoded_paths = tuple(encoded_paths)
        self.model_readers = tuple(model_readers)

    def _hides_a_separator(self, raw_path: bytes) -> bool:
        return b"%" in raw_path and not raw_path.startswith(self.encoded_paths)

    def _requested_model(self, scope: Scope, ctx: RequestContext) -> str:
        if ctx.requested_model:
            return ctx.requested_model
        for read in self.model_readers:
            model = read(scope["path"])
            if model:
                return model
        return ""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        incoming = None
        for name, value in scope["headers"]:
            if name == b"x-request-id":
                incoming = value.decode("latin-1")
                break
        ctx = RequestContext(request_id=new_request_id(), client_request_id=client_request_id(incoming))
        state: RequestState = scope.setdefault("state", {})
        state["ctx"] = ctx
        # The lifespan's Tracing, or None when tracing is off: then this test is its whole cost.
        tracing = state.get("tracing")
        if tracing is not None and scope["path"].startswith(self.api_paths):
            ctx.trace = tracing.start(scope, ctx, self.forwarding.client_address(scope))
        # The client's id is echoed back as it sent it; the gateway's own always comes too.
        id_headers = (
            (b"x-request-id", (ctx.client_request_id or ctx.request_id).encode()),
            (b"x-sluicegate-request-id", ctx.request_id.encode()),
        )

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                ctx.status = message["status"]
                headers = [*message.get("headers", ())]
                if ctx.ignored:  # what the request's translation dropped, on every answer to it
                    headers.append(ignored.header(ctx.ignored))
                message["headers"] = [*headers, *id_headers]
            await send(message)

        try:
            if self._hides_a_separator(scope.get("raw_path") or b""):
                refusal = GatewayError(
                    ErrorCode.INVALID_REQUEST,
                    "The path must not be percent-encoded (except a model name under /v1/models/).",
                )
                ctx.answered_with(refusal)
                await refusal.response()(scope, receive, send_with_id)
                return
            await self.app(scope, receive, send_with_id)
        except asyncio.CancelledError:
            if not self.drain.absorbed():
                raise
            # The drain's cut reached a request before its answer began (the pipeline answers its
            # own in its API's envelope; this is every other route).
            if ctx.status == 0:
                cut = self.drain.error()
                ctx.answered_with(cut)
                await cut.response()(scope, receive, send_with_id)
        finally:
            self._finish(scope, ctx)

    def _finish(self, scope: Scope, ctx: RequestContext) -> None:
        elapsed = time.perf_counter() - ctx.started
        path: str = scope["path"]
        status = ctx.status or 500
        if path.startswith(self.api_paths):
            model = ctx.model or UNKNOWN_MODEL
            # `api` is a dialect's name (or "models"): set by the code, never by the client.
            api = ctx.api or "none"
            self.metrics.child(self.metrics.requests, model, ctx.team or "none", api, str(status)).inc()
            if ctx.model:
                self.metrics.child(self.metrics.request_duration, model).observe(elapsed)
        if ctx.trace is not None:
            ctx.trace.finish(scope, status)
        level = logging.DEBUG if path in _QUIET_PATHS else logging.INFO
        if access_log.isEnabledFor(level):
            fields = self._fields(scope, ctx, status, elapsed)
            access_log.log(level, fields.line(_ACCESS_TEXT), fields)

    def _fields(self, scope: Scope, ctx: RequestContext, status: int, elapsed: float) -> Fields:
        # Every value a client could have chosen is escaped: the method too, though httptools only
        # lets known methods through, and the model, team and key id, though those are names the
        # gateway knows. None is `-` in a text line and null in a JSON one.
        user_agent = None
        for name, value in scope["headers"]:
            if name == b"user-agent":
                user_agent = _client_text(value.decode("latin-1"))
                break
        return Fields(
            request_id=ctx.request_id,
            client_request_id=ctx.client_request_id,
            method=loggable(scope["method"]),
            path=loggable(scope["path"]),
            status=status,
            api=ctx.api or None,
            model=loggable(ctx.model) if ctx.model else None,
            served_by_model=ctx.served_by_model or None,
            team=loggable(ctx.team) if ctx.team else None,
            key_id=loggable(ctx.key_id) if ctx.key_id else None,
            endpoint=ctx.endpoint or None,
            served_by=ctx.served_by or None,
            attempts=ctx.attempts,
            ttft_ms=None if ctx.ttft_ms is None else round(ctx.ttft_ms, 1),
            duration_ms=round(elapsed * 1000, 1),
            prompt_tokens=ctx.prompt_tokens,
            completion_tokens=ctx.completion_tokens,
            outcome=ctx.outcome or None,
            limit=None if ctx.refused_by is None else "/".join(reversed(ctx.refused_by)),
            client=loggable(self.forwarding.client_address(scope)) or None,
            user_agent=user_agent,
            # The body's model as the client wrote it, even when it named no model we serve (a
            # client that pastes its key there finds it redacted, not logged).
            requested_model=_client_text(self._requested_model(scope, ctx)),
            # The code and param of the error the client was answered with (a code the gateway
            # chose; a param from the parsers, which may quote a client's field name).
            error=ctx.error_code or None,
            param=_client_text(ctx.error_param),
            # Which header or field placed it (never the value: an agent's session id).
            session=ctx.session_source or None,
        )
