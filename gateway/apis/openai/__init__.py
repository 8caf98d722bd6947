"""OpenAI's chat completions, completions and embeddings (the workers' own wire format), and the
model listings: the OpenAI SDKs' key comes as `Authorization: Bearer`."""

from __future__ import annotations

from gateway.apis.openai import dialect
from gateway.apis.openai.models import SIDE_ROUTES
from gateway.apis.openai.openapi import OPENAPI
from gateway.apis.openai.routes import routes
from gateway.apis.spec import ClientApi
from gateway.keys.credentials import BEARER

API = ClientApi(
    name="openai",
    operations={
        dialect.CHAT.name: "chat",
        dialect.COMPLETIONS.name: "text_completion",
        dialect.EMBEDDINGS.name: "embeddings",
    },
    credentials=(BEARER,),
    routes=routes,
    openapi=OPENAPI,
    paths=("/v1/",),
    side_routes=SIDE_ROUTES,
    body_lists=dialect.LISTS,
    home={"openai": "/v1"},
    # The OpenAI SDK percent-encodes a `/` in a model name (`models.retrieve("org/model")`).
    encoded_paths=(b"/v1/models/",),
)
