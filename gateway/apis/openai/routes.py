"""The OpenAI API's main routes: chat, completions and embeddings through the pipeline (the model
listings are its side routes: gateway.apis.openai.models)."""

from __future__ import annotations

from starlette.routing import BaseRoute, Route

from gateway.apis.endpoint import ProxyEndpoint
from gateway.apis.openai.dialect import CHAT, COMPLETIONS, EMBEDDINGS


def routes() -> list[BaseRoute]:
    return [
        Route("/v1/chat/completions", ProxyEndpoint(CHAT), methods=["POST"]),
        Route("/v1/completions", ProxyEndpoint(COMPLETIONS), methods=["POST"]),
        Route("/v1/embeddings", ProxyEndpoint(EMBEDDINGS), methods=["POST"]),
    ]
