"""The OpenAI API's routes: chat, completions and embeddings through the pipeline, and the model
listings. `{model:path}`: a model name may hold a `/` (`meta-llama/Llama-3-8B`)."""

from __future__ import annotations

from starlette.routing import BaseRoute, Route

from gateway.apis.endpoint import ProxyEndpoint
from gateway.apis.openai import models
from gateway.apis.openai.dialect import CHAT, COMPLETIONS, EMBEDDINGS


def routes() -> list[BaseRoute]:
    return [
        Route("/v1/chat/completions", ProxyEndpoint(CHAT), methods=["POST"]),
        Route("/v1/completions", ProxyEndpoint(COMPLETIONS), methods=["POST"]),
        Route("/v1/embeddings", ProxyEndpoint(EMBEDDINGS), methods=["POST"]),
        Route("/v1/models", models.list_models, methods=["GET"]),
        Route("/v1/models/{model:path}", models.retrieve_model, methods=["GET"]),
    ]
