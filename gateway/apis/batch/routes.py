"""The Files and Batch API's routes: side routes (gateway.apis.spec), one per path, each method to
its handler. A Redis or file store failure is a 503 or 502 in OpenAI's envelope (never a 500:
neither is a bug of the gateway's)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping

from starlette.requests import Request
from starlette.responses import Response

from gateway.apis.batch import batches, files
from gateway.apis.spec import SideRoute
from gateway.errors import ErrorCode, GatewayError, StoreUnavailable
from gateway.files.storage import StorageError
from gateway.http.context import RequestContext

Handler = Callable[[Request], Awaitable[Response]]


def _route(path: str, api: str, handlers: Mapping[str, Handler]) -> SideRoute:
    async def handle(request: Request, ctx: RequestContext) -> Response:
        method = "GET" if request.method == "HEAD" else request.method
        try:
            return await handlers[method](request)
        except StoreUnavailable:
            raise GatewayError(
                ErrorCode.REDIS_UNAVAILABLE, "The batch store is unavailable; try again shortly."
            ) from None
        except StorageError:
            raise files.storage_failed() from None

    return SideRoute(path, tuple(handlers), api, handle)


SIDE_ROUTES = (
    _route("/v1/files", "files", {"POST": files.create_file, "GET": files.list_files}),
    _route("/v1/files/{file_id}", "files", {"GET": files.retrieve_file, "DELETE": files.delete_file}),
    _route("/v1/files/{file_id}/content", "files", {"GET": files.file_content}),
    _route("/v1/batches", "batches", {"POST": batches.create_batch, "GET": batches.list_batches}),
    _route("/v1/batches/{batch_id}", "batches", {"GET": batches.retrieve_batch}),
    _route("/v1/batches/{batch_id}/cancel", "batches", {"POST": batches.cancel_batch}),
)
