"""OpenAI's Files and Batch API (docs/batch.md): files uploaded to the file store, batches run by
the gateway's engines on idle capacity (gateway/batch/). `LINE_DIALECTS`: the dialect each batch
endpoint's lines run with, handed to the engine by the app."""

from __future__ import annotations

from typing import Any

from gateway.apis.batch.openapi import OPENAPI
from gateway.apis.batch.routes import SIDE_ROUTES
from gateway.apis.openai.dialect import CHAT, COMPLETIONS, EMBEDDINGS
from gateway.apis.responses.dialect import RESPONSES
from gateway.apis.spec import ClientApi
from gateway.keys.credentials import BEARER
from gateway.proxy.dialect import Dialect

API = ClientApi(
    name="batch",
    credentials=(BEARER,),
    openapi=OPENAPI,
    # Under the OpenAI API's /v1/: its metrics, spans and 404s already.
    paths=("/v1/files", "/v1/batches"),
    # A batch line's spans (`ctx.api` "batch") are chat-like; the routes' own are files/batches.
    operations={"files": "files", "batches": "batches", "batch": "chat"},
    side_routes=SIDE_ROUTES,
)

LINE_DIALECTS: dict[str, Dialect[Any]] = {
    "/v1/chat/completions": CHAT,
    "/v1/completions": COMPLETIONS,
    "/v1/embeddings": EMBEDDINGS,
    "/v1/responses": RESPONSES,
}
