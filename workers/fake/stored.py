"""The stored responses of one fake worker, and the routes that read them back:
`GET`/`DELETE /v1/responses/{id}`, `POST /v1/responses/{id}/cancel`,
`GET /v1/responses/{id}/input_items` (see `workers/fake/responses.py` for the wire shapes).

The store lives in the worker's memory, as vLLM's lives in its serving process: a response is
found only on the worker that made it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response

from workers.common.errors import RequestError
from workers.fake.plan import injected_status

if TYPE_CHECKING:
    from workers.fake.app import FakeWorker

JSONObject = dict[str, Any]


def not_found(response_id: str) -> RequestError:
    message = f"Response with id '{response_id}' not found."
    return RequestError(404, message, "response_id", err_type="invalid_request_error")


@dataclass(slots=True)
class Stored:
    response: JSONObject
    input_items: list[JSONObject]
    conversation_tokens: int
    """Prompt plus output tokens: what a response continuing this one counts as its history."""


class ResponseStore:
    """This process's stored responses, by id (vLLM keeps them in the serving process's memory)."""

    def __init__(self) -> None:
        self._responses: dict[str, Stored] = {}

    def put(self, stored: Stored) -> None:
        self._responses[stored.response["id"]] = stored

    def get(self, response_id: str) -> Stored:
        stored = self._responses.get(response_id)
        if stored is None:
            raise not_found(response_id)
        return stored

    def delete(self, response_id: str) -> None:
        if self._responses.pop(response_id, None) is None:
            raise not_found(response_id)

    def __len__(self) -> int:
        return len(self._responses)


def _refusal(request: Request) -> RequestError | None:
    try:
        return injected_status(dict(request.headers.items()))
    except RequestError as err:
        return err


async def get_response(worker: FakeWorker, request: Request) -> Response:
    try:
        if (refused := _refusal(request)) is not None:
            raise refused
        stored = worker.responses.get(request.path_params["response_id"])
    except RequestError as err:
        return worker.error(None, err)
    return worker.json(stored.response)


async def delete_response(worker: FakeWorker, request: Request) -> Response:
    response_id = request.path_params["response_id"]
    try:
        if (refused := _refusal(request)) is not None:
            raise refused
        worker.responses.delete(response_id)
    except RequestError as err:
        return worker.error(None, err)
    return worker.json({"id": response_id, "object": "response", "deleted": True})


async def cancel_response(worker: FakeWorker, request: Request) -> Response:
    record = await worker.intake(request)
    if record is None:
        return worker.gone()
    try:
        if (refused := _refusal(request)) is not None:
            raise refused
        worker.responses.get(request.path_params["response_id"])
        message = "Cannot cancel a synchronous response."
        raise RequestError(400, message, "response_id", err_type="invalid_request_error")
    except RequestError as err:
        return worker.error(record, err)


def _limit(raw: str | None) -> int:
    try:
        limit = 20 if raw is None else int(raw)
    except ValueError:
        limit = 0
    if not 1 <= limit <= 100:
        raise RequestError(400, "limit must be an integer from 1 to 100", "limit")
    return limit


async def list_input_items(worker: FakeWorker, request: Request) -> Response:
    query = request.query_params
    try:
        if (refused := _refusal(request)) is not None:
            raise refused
        items = list(worker.responses.get(request.path_params["response_id"]).input_items)
        order = query.get("order", "desc")
        if order not in ("asc", "desc"):
            raise RequestError(400, "order must be asc or desc", "order")
        limit = _limit(query.get("limit"))
    except RequestError as err:
        return worker.error(None, err)
    if order == "desc":
        items.reverse()
    after = query.get("after")
    ids = [item["id"] for item in items]
    if after in ids:
        items = items[ids.index(after) + 1 :]
    page = items[:limit]
    return worker.json(
        {
            "object": "list",
            "data": page,
            "first_id": page[0]["id"] if page else None,
            "last_id": page[-1]["id"] if page else None,
            "has_more": len(items) > limit,
        }
    )
