"""The pipeline's `parse` step: the dialect's parse, with what the request's record learns from
the body on the way, whether the body is taken or refused."""

from __future__ import annotations

import re
from collections.abc import Collection

import orjson
from starlette.requests import Request

from gateway.errors import GatewayError
from gateway.http.context import RequestContext
from gateway.proxy.dialect import CallT, Dialect
from gateway.proxy.translation.bounds import BodyBounds, check_values
from gateway.routing.session import session_of

# A refused body longer than this has its model found by a search (`_model_named`): the first
# `"model": "<name>"` pair, which a string's escaped quotes cannot form.
_PARSED_UP_TO = 64 * 1024
_MODEL_FIELD = re.compile(rb'"model"\s*:\s*"([^"\\]{1,256})"')


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
    """A refused body's `model`, when it has one (only on that path: a second parse). A large body
    is searched, not parsed again: the 8 MB bodies refused for their size cost the loop more in
    this second parse (for a log field) than in everything else together."""
    if len(body) > _PARSED_UP_TO:
        at = body.find(b'"model"')  # a fast substring search first: the pattern's scan is slower
        found = _MODEL_FIELD.match(body, at) if at >= 0 else None
        return found.group(1).decode("utf-8", "replace") if found else ""
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError:
        return ""
    model = parsed.get("model") if isinstance(parsed, dict) else None
    return model if isinstance(model, str) else ""
