"""The OpenAPI document of the gateway as it serves `APIS` (what GET /openapi.json returns):
gateway.edge.openapi assembled with every client API's part."""

from __future__ import annotations

from gateway.apis import APIS
from gateway.edge import openapi
from gateway.edge.openapi_parts import Schema


def document() -> Schema:
    """A fresh copy each call: callers may edit it."""
    return openapi.document([api.openapi for api in APIS])
