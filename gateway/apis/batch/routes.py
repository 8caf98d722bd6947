"""The Files and Batch API's routes. Each handler answers a Redis or file store failure with a 503
or 502 in OpenAI's envelope (never a 500: neither is a bug of the gateway's)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from redis.exceptions import RedisError
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from gateway.apis.batch import batches, files
from gateway.errors import ErrorCode, GatewayError
from gateway.files.storage import StorageError

Handler = Callable[[Request], Awaitable[Response]]


def _guarded(handler: Handler) -> Handler:
    async def endpoint(request: Request) -> Response:
        try:
            return await handler(request)
        except RedisError:
            raise GatewayError(
                ErrorCode.REDIS_UNAVAILABLE, "The batch store is unavailable; try again shortly."
            ) from None
        except StorageError:
            raise files.storage_failed() from None

    return endpoint


def routes() -> list[BaseRoute]:
    return [
        Route("/v1/files", _guarded(files.create_file), methods=["POST"]),
        Route("/v1/files", _guarded(files.list_files), methods=["GET"]),
        Route("/v1/files/{file_id}", _guarded(files.retrieve_file), methods=["GET"]),
        Route("/v1/files/{file_id}", _guarded(files.delete_file), methods=["DELETE"]),
        Route("/v1/files/{file_id}/content", _guarded(files.file_content), methods=["GET"]),
        Route("/v1/batches", _guarded(batches.create_batch), methods=["POST"]),
        Route("/v1/batches", _guarded(batches.list_batches), methods=["GET"]),
        Route("/v1/batches/{batch_id}", _guarded(batches.retrieve_batch), methods=["GET"]),
        Route("/v1/batches/{batch_id}/cancel", _guarded(batches.cancel_batch), methods=["POST"]),
    ]
