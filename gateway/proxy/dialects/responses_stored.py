"""The Responses routes that read a stored response back: `GET`/`DELETE /v1/responses/{id}`,
`POST /v1/responses/{id}/cancel`, `GET /v1/responses/{id}/input_items`.

Translated pools store nothing (`store: true` is refused when the response is made), so every id
is unknown here. The caller is still authenticated first: without a valid key the answer is 401,
never a hint about which ids exist.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from gateway.errors import ErrorCode, GatewayError
from gateway.keys.auth import Authenticator
from gateway.proxy.context import RequestContext
from gateway.proxy.dialects.responses_request import NATIVE_SETTING


async def _not_stored(request: Request) -> Response:
    ctx = RequestContext.of(request.scope)
    ctx.api = "responses"
    auth: Authenticator = request.scope["state"]["auth"]
    key = (await auth.authenticate(request.headers)).key
    ctx.team, ctx.key_id = key.team, key.id
    raise GatewayError(
        ErrorCode.NOT_FOUND,
        "No such response: responses are not stored on translated pools (stored responses need a "
        f"pool configured with `{NATIVE_SETTING}`).",
    )


def stored_routes() -> list[Route]:
    return [
        Route("/v1/responses/{response_id}", _not_stored, methods=["GET", "DELETE"]),
        Route("/v1/responses/{response_id}/cancel", _not_stored, methods=["POST"]),
        Route("/v1/responses/{response_id}/input_items", _not_stored, methods=["GET"]),
    ]
