"""The client APIs, one package each; `APIS` is the one tuple the app mounts (gateway.app).

Each package declares itself once, as a `ClientApi` (gateway.apis.spec): its routes and side
routes, where it takes a key, its paths (metrics and spans), its bodies' bounded lists, its hosted
tools, its landing-page entries, what never reaches a worker, its spans' operation names, its
unknown routes and its OpenAPI part. Shared pieces live below, where the pipeline can reach them
without importing this package: the `Dialect` seam in gateway.proxy.dialect, the translation
helpers every API uses in gateway.proxy.translation, the one gate in gateway.proxy.gate.

A new API is a new package here and one line in `APIS`; no shared module names it.
"""

from __future__ import annotations

from gateway.apis import anthropic, batch, gemini, openai, responses
from gateway.apis.spec import ClientApi

APIS: tuple[ClientApi, ...] = (
    openai.API,
    responses.API,
    anthropic.API,
    gemini.API,
    batch.API,
)

__all__ = ["APIS", "ClientApi"]
