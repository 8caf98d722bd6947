"""The Files and Batch API's routes."""

from __future__ import annotations

from starlette.routing import BaseRoute, Route

from gateway.apis.batch import batches, files


def routes() -> list[BaseRoute]:
    return [
        Route("/v1/files", files.create_file, methods=["POST"]),
        Route("/v1/files", files.list_files, methods=["GET"]),
        Route("/v1/files/{file_id}", files.retrieve_file, methods=["GET"]),
        Route("/v1/files/{file_id}", files.delete_file, methods=["DELETE"]),
        Route("/v1/files/{file_id}/content", files.file_content, methods=["GET"]),
        Route("/v1/batches", batches.create_batch, methods=["POST"]),
        Route("/v1/batches", batches.list_batches, methods=["GET"]),
        Route("/v1/batches/{batch_id}", batches.retrieve_batch, methods=["GET"]),
        Route("/v1/batches/{batch_id}/cancel", batches.cancel_batch, methods=["POST"]),
    ]
