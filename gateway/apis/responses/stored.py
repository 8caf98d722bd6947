"""The Responses routes that reach a stored response: `GET`/`DELETE /v1/responses/{id}`,
`POST /v1/responses/{id}/cancel`, `GET /v1/responses/{id}/input_items`.

Only a native Responses pool stores responses, each in the worker process that made it: the call
goes to that endpoint (gateway.routing.stored_responses), for the team that made the response
only. An id that is unknown, another team's, or of a model the key may not use is the same 404,
so a key learns nothing about the ids of others. The caller is authenticated first: without a
valid key the answer is 401. These calls generate nothing, but each costs the worker a call: they
count against the key's requests per minute and concurrent requests (gateway.proxy.request_limits),
never its token limits or budgets, and nothing is metered. The worker's answer is read up to
`_MAX_ANSWER_BYTES`; a larger one is a 502, not memory the gateway holds. Side routes
(gateway.apis.spec.SideRoute): an error is told in OpenAI's envelope, once, by the endpoint.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

import orjson
from starlette.requests import Request
from starlette.responses import Response

from gateway.apis.responses.request import NATIVE_SETTING
from gateway.apis.spec import SideRoute
from gateway.errors import ErrorCode, GatewayError
from gateway.http.context import RequestContext
from gateway.proxy.translation.native import RESPONSES_PATH, named
from gateway.proxy.worker_errors import worker_failure
from gateway.routing.stored_responses import RESPONSE_ID_RE
from gateway.state import app_state

# A stored response or its input items: a 128k-token conversation is a few MB of JSON, parsed and
# written again here; a worker answering more is broken, not a conversation.
_MAX_ANSWER_BYTES = 16 * 1024 * 1024
# input_items' paging parameters, the only query a worker is sent.
_QUERY = ("after", "before", "limit", "order", "include", "include[]")


def _unknown(response_id: str) -> GatewayError:
    return GatewayError(
        ErrorCode.NOT_FOUND,
        f"No stored response with id '{response_id}' (translated pools store none; stored "
        f"responses need a pool configured with `{NATIVE_SETTING}`).",
    )


async def _stored(request: Request, ctx: RequestContext, method: str, suffix: str = "") -> Response:
    state = app_state(request.scope)
    gate = state["gate"]
    principal = await gate.caller(request, ctx)
    key = principal.key
    response_id: str = request.path_params["response_id"]
    if not RESPONSE_ID_RE.fullmatch(response_id):
        raise _unknown(response_id[:128])
    stored = state["stored"]
    holder = await stored.find(response_id)
    # Bound to the team's id, not its name: a team re-created under a deleted one's name reads none.
    if holder is None or holder.team != principal.team_id or not key.may_use(holder.model):
        raise _unknown(response_id)
    ctx.model = holder.model
    pool = state["router"].pool(holder.pool)
    if pool is None or pool.get(holder.endpoint) is None:
        raise GatewayError(
            ErrorCode.NOT_FOUND, f"The worker that stored the response '{response_id}' is gone."
        )
    query = [(k, v) for k, v in request.query_params.multi_items() if k in _QUERY]
    url = holder.endpoint + f"{RESPONSES_PATH}/{response_id}{suffix}"
    if query:
        url += "?" + urlencode(query)
    upstream = state["upstream"]
    timeouts = pool.model.timeouts
    async with gate.worker_call(principal, ctx):
        answer = await upstream.call_endpoint(
            method,
            url,
            body=b"" if method == "POST" else None,
            headers={"x-request-id": ctx.request_id},
            connect_s=timeouts.connect,
            total_s=timeouts.idle,
            max_bytes=_MAX_ANSWER_BYTES,
        )
    if answer.status != 200:
        raise worker_failure(holder.model, answer.status, answer.body, answer.headers)
    try:
        body: Any = orjson.loads(answer.body)
    except orjson.JSONDecodeError:
        body = None
    if not isinstance(body, dict):
        raise GatewayError(ErrorCode.UPSTREAM_ERROR, "The worker answered with invalid JSON.")
    if method == "DELETE":
        await stored.forget(response_id)
    return Response(orjson.dumps(named(body, holder.answer_name)), media_type="application/json")


async def _response(request: Request, ctx: RequestContext) -> Response:
    # HEAD (which Starlette adds to a GET route) reads like GET; the server leaves out the body.
    return await _stored(request, ctx, "GET" if request.method == "HEAD" else request.method)


async def _cancel(request: Request, ctx: RequestContext) -> Response:
    return await _stored(request, ctx, "POST", "/cancel")


async def _input_items(request: Request, ctx: RequestContext) -> Response:
    return await _stored(request, ctx, "GET", "/input_items")


# The `api` of these routes in metrics and the access log.
_API = "responses"
SIDE_ROUTES = (
    SideRoute("/v1/responses/{response_id}", ("GET", "DELETE"), _API, _response),
    SideRoute("/v1/responses/{response_id}/cancel", ("POST",), _API, _cancel),
    SideRoute("/v1/responses/{response_id}/input_items", ("GET",), _API, _input_items),
)
