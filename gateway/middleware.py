"""The one middleware: a request id on every request and response, then one access-log line and
the request metrics once the last byte has gone (so a stream is measured whole)."""

from __future__ import annotations

import logging
import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.context import RequestContext, request_id_from
from gateway.metrics import UNKNOWN_MODEL, Metrics

access_log = logging.getLogger("sluicegate.access")
_QUIET_PATHS = frozenset({"/metrics", "/healthz", "/readyz"})


class RequestContextMiddleware:
    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        incoming = None
        for name, value in scope["headers"]:
            if name == b"x-request-id":
                incoming = value.decode("latin-1")
                break
        ctx = RequestContext(request_id=request_id_from(incoming))
        scope.setdefault("state", {})["ctx"] = ctx
        rid_header = (b"x-request-id", ctx.request_id.encode())

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                ctx.status = message["status"]
                message["headers"] = [*message.get("headers", ()), rid_header]
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            self._finish(scope, ctx)

    def _finish(self, scope: Scope, ctx: RequestContext) -> None:
        elapsed = time.perf_counter() - ctx.started
        path: str = scope["path"]
        status = ctx.status or 500
        if path.startswith("/v1/"):
            model = ctx.model or UNKNOWN_MODEL
            self.metrics.requests.labels(model, ctx.team or "none", str(status)).inc()
            if ctx.model:
                self.metrics.request_duration.labels(model).observe(elapsed)
        level = logging.DEBUG if path in _QUIET_PATHS else logging.INFO
        if access_log.isEnabledFor(level):
            access_log.log(
                level,
                "request_id=%s method=%s path=%s status=%d duration_ms=%.1f model=%s team=%s "
                "key_id=%s prompt_tokens=%d completion_tokens=%d outcome=%s",
                ctx.request_id,
                scope["method"],
                path,
                status,
                elapsed * 1000,
                ctx.model or "-",
                ctx.team or "-",
                ctx.key_id or "-",
                ctx.prompt_tokens,
                ctx.completion_tokens,
                ctx.outcome or "-",
            )
