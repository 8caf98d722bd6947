"""The pipeline's `parse` step: the dialect's parse, with what the request's record learns from
the body on the way, whether the body is taken or refused."""

from __future__ import annotations

from collections.abc import Collection

import orjson
from starlette.requests import Request

from gateway.errors import GatewayError
from gateway.http.context import RequestContext
from gateway.proxy.dialect import CallT, Dialect
from gateway.proxy.translation.bounds import BodyBounds, check_values
from gateway.routing.session import session_of


def parse(
    dialect: Dialect[CallT],
    body: bytes,
    native: Collection[str],
    ctx: RequestContext,
    request: Request,
    bounds: BodyBounds,
) -> CallT:
    """The dialect's parse, noting on `ctx` the model the body names (for the access log, also
    when the body is refused) and the session the request belongs to (for routing)."""
    try:
        if len(body) > bounds.max_values:  # else it cannot hold that many (no call on the hot path)
            check_values(body, bounds.max_values)  # before the parse, which holds the loop
        call = dialect.parse(body, native, bounds)
    except GatewayError:
        ctx.requested_model = _model_named(body)
        raise
    ctx.requested_model = call.model
    found = session_of(request.scope["headers"], body, call.user)
    if found is not None:
        ctx.session_id, ctx.session_source = found.value, found.source
    return call


def _model_named(body: bytes) -> str:
    """A refused body's `model`, when it has one (only on that path: a second parse)."""
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError:
        return ""
    model = parsed.get("model") if isinstance(parsed, dict) else None
    return model if isinstance(model, str) else ""
