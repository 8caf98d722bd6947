"""What every SCIM route does around its handler: the SCIM bearer token, the body read once and
bounded, Redis bounded in time, and every failure answered in SCIM's envelope (never a 500 for
bad input, never the gateway's OpenAI envelope, which an IdP cannot read).

    Authorization: Bearer <SLUICEGATE_SCIM_TOKEN>

The token is the IdP's alone: it provisions, it never reads the admin API, and no admin token or
person's token reaches the directory. It is compared in constant time (digests of both sides);
an address that keeps sending wrong ones is throttled by the admin API's AdminThrottle, so
guessing costs the same on either door.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import orjson
from pydantic import ValidationError
from scim2_models import Error, NotFoundException, SCIMException, UnauthorizedException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from gateway.admin.audit import RequestJournal
from gateway.admin.deps import AdminDeps
from gateway.errors import GatewayError
from gateway.http.body import read_body
from gateway.identity.principal import SCIM
from gateway.observability.logs import loggable
from gateway.scim.errors import ScimError, from_validation, invalid_syntax, scim_response

log = logging.getLogger("sluicegate.scim")

# A group's PUT with ten thousand members is about 600 KB of JSON.
SCIM_BODY_LIMIT = 2 * 1024 * 1024
BASE_PATH = "/scim/v2"
Handler = Callable[["ScimRequest"], Awaitable[Response]]


class ScimRequest:
    """One authenticated SCIM request: its body (read once), its deps, its audit journal."""

    def __init__(self, request: Request, deps: AdminDeps, body: bytes, peer: str) -> None:
        self.request = request
        self.deps = deps
        self.body = body
        self.peer = peer

    @property
    def base_url(self) -> str:
        """Where resources live, for `meta.location` and `$ref`: SLUICEGATE_PUBLIC_URL when set
        (the admin entrance, behind its ingress), else the request's own; computed per response,
        never stored (a Host header names only the asker's own view)."""
        base = self.deps.settings.public_url or str(self.request.base_url)
        return base.rstrip("/") + BASE_PATH

    def param(self, name: str) -> str:
        value: str = self.request.path_params[name]
        return value

    def json(self) -> dict[str, Any]:
        try:
            body = orjson.loads(self.body or b"")
        except orjson.JSONDecodeError:
            raise invalid_syntax("The request body is not valid JSON.") from None
        if not isinstance(body, dict):
            raise invalid_syntax("The request body must be a JSON object.")
        return body

    def journal(self) -> RequestJournal:
        return self.deps.audit.by(SCIM.actor(), self.peer)


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()


async def _authenticate(request: Request, deps: AdminDeps) -> str:
    """The caller's address once its token is the SCIM token; a ScimError otherwise."""
    token = deps.settings.scim_token
    if token is None:
        raise ScimError(
            with_status(
                SCIMException(detail="SCIM is off: start the gateway with SLUICEGATE_SCIM_TOKEN set."), 403
            )
        )
    peer = deps.throttle.address(request.scope)
    header = request.headers.get("authorization", "")
    scheme, _, given = header.partition(" ")
    if scheme.lower() == "bearer" and hmac.compare_digest(_digest(given.strip()), _digest(token)):
        return peer
    retry_after = deps.throttle.retry_after(peer)
    if retry_after is not None:
        exc = with_status(
            SCIMException(detail=f"Too many wrong SCIM tokens; try again in {retry_after} s."), 429
        )
        raise ScimError(exc, headers={"retry-after": str(retry_after)})
    deps.throttle.failed(peer)
    log.warning(
        "scim token rejected: peer=%s path=%s presented=%s",
        loggable(peer or "-"),
        loggable(request.url.path),
        "yes" if given else "no",
    )
    raise ScimError(
        UnauthorizedException(
            detail="Missing or wrong SCIM token (Authorization: Bearer <SLUICEGATE_SCIM_TOKEN>)."
        ),
        headers={"www-authenticate": 'Bearer realm="scim"'},
    )


def with_status(exc: SCIMException, status: int) -> SCIMException:
    exc.status = status
    return exc


def endpoint(methods: Mapping[str, Handler]) -> Callable[[Request], Awaitable[Response]]:
    async def serve(request: Request) -> Response:
        handler = methods.get(request.method) or (methods.get("GET") if request.method == "HEAD" else None)
        try:
            deps = AdminDeps.of(request.scope)
            peer = await _authenticate(request, deps)
            if handler is None:
                allowed = ", ".join(sorted(methods))
                raise ScimError(
                    with_status(SCIMException(detail=f"Use one of {allowed}."), 405), {"allow": allowed}
                )
            body = await read_body(request, SCIM_BODY_LIMIT, deps.settings.body_timeout_s)
            # A group's deletion walks its members: more round trips than an admin call's.
            async with asyncio.timeout(8 * deps.settings.redis_timeout_s):
                return await handler(ScimRequest(request, deps, body, peer))
        except ScimError as exc:
            return exc.response()
        except ValidationError as exc:
            return from_validation(exc).response()
        except SCIMException as exc:
            return ScimError(exc).response()
        except GatewayError as exc:  # the body's size or time limit
            return scim_response(
                Error(status=exc.code.status, detail=exc.message), exc.code.status, headers=exc.headers
            )
        except TimeoutError:  # a store's StoreUnavailable is a GatewayError: answered above
            return scim_response(Error(status=503, detail="Redis is unavailable; try again shortly."), 503)

    return serve


def not_found(path: str) -> Route:
    async def handler(request: ScimRequest) -> Response:
        raise ScimError(NotFoundException(detail=f"No SCIM endpoint at {request.request.url.path[:100]}."))

    every = {m: handler for m in ("GET", "POST", "PUT", "PATCH", "DELETE")}
    return Route(path, endpoint(every), methods=[*every, "HEAD"])


def route(path: str, methods: Mapping[str, Handler]) -> Route:
    """One Route per path, taking every method: a wrong one gets SCIM's 405, not Starlette's."""
    return Route(path, endpoint(methods), methods=["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"])
