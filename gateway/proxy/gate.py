"""The one gate of every client route: authenticate -> resolve the model -> may this key use it.

The pipeline, Anthropic's count_tokens, the stored-response routes and the model listings all
pass through it, so a check added here holds on every route at once, and the answers (401, 404
`model_not_found`, 403 `model_not_allowed`) read the same everywhere. It notes on the request's
record (`ctx`) who called and which model, for the access log, metrics and the span. A side route
that calls a worker (a token count, a stored response) holds `worker_call` around the call: the
key's request limits (gateway.proxy.request_limits).
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager

from starlette.requests import Request

from gateway.errors import ErrorCode, GatewayError
from gateway.http.context import RequestContext
from gateway.keys.auth import Authenticator, Principal
from gateway.keys.store import KeyRecord
from gateway.limits.admission import Admission
from gateway.observability import tracing
from gateway.proxy.request_limits import RequestLimits
from gateway.proxy.worker_errors import sanitised
from gateway.routing.router import ModelRoute, Router


class Gate:
    __slots__ = ("_auth", "_limits", "_router")

    def __init__(self, auth: Authenticator, router: Router, limits: RequestLimits) -> None:
        self._auth = auth
        self._router = router
        self._limits = limits

    async def caller(self, request: Request, ctx: RequestContext) -> Principal:
        """Who calls: the key (from any place a client API takes one), and its team's limits."""
        preset: Principal | None = request.scope["state"].get("principal")
        if preset is not None:  # a batch line: its batch's key, checked when the line started
            principal = preset
            ctx.team, ctx.key_id = principal.key.team, principal.key.id
            return principal
        with tracing.phase(ctx.trace, "authenticate"):
            # Most requests have no query string: no QueryParams parsed for nothing.
            query = request.query_params if request.scope["query_string"] else None
            principal = await self._auth.authenticate(request.headers, query)
        ctx.team, ctx.key_id = principal.key.team, principal.key.id
        return principal

    def model(self, key: KeyRecord, name: str, ctx: RequestContext) -> ModelRoute:
        """The model (or alias) `name` names, which this key must be allowed."""
        route = self._router.resolve(name)
        if route is None:
            raise GatewayError(
                ErrorCode.MODEL_NOT_FOUND, f"The model '{sanitised(name)}' does not exist.", param="model"
            )
        ctx.model = route.model.name
        if not key.may_use(ctx.model):
            raise GatewayError(
                ErrorCode.MODEL_NOT_ALLOWED,
                f"This API key may not use the model '{sanitised(name)}'.",
                param="model",
            )
        return route

    def worker_call(
        self, principal: Principal, ctx: RequestContext
    ) -> AbstractAsyncContextManager[Admission]:
        """`async with gate.worker_call(principal, ctx):` around a side route's call to a worker of
        `ctx.model`: admitted by its request limits (a 429 if not), its slot freed however it ends."""
        return self._limits.held(principal, ctx)

    def visible(self, key: KeyRecord, name: str) -> ModelRoute:
        """The model `name` names, if the key may use it; for one it may not, the same 404 as for
        one that does not exist: where a key learns nothing about the models of other teams."""
        route = self._router.resolve(name)
        if route is None or not key.may_use(route.model.name):
            raise GatewayError(
                ErrorCode.MODEL_NOT_FOUND,
                f"The model '{sanitised(name)}' does not exist or this key may not use it.",
                param="model",
            )
        return route

    def models(self, key: KeyRecord) -> list[ModelRoute]:
        """Every model this key may use."""
        return [route for route in self._router.models() if key.may_use(route.model.name)]
