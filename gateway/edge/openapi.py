"""GET /openapi.json: an OpenAPI 3.1 document of every route the gateway serves.

The one place the HTTP surface is written down for machines: tests/generated checks that its
routes are exactly the app's, and sends generated (valid and invalid) requests from it to a real
gateway. Error responses are described by the codes gateway.errors maps to each status, and the
body schemas (gateway.edge.openapi_schemas) take their patterns from the validating code.
"""

from __future__ import annotations

from collections.abc import Sequence

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from gateway.edge import key_info
from gateway.edge import openapi_schemas as s
from gateway.edge.openapi_admin import admin_paths
from gateway.edge.openapi_parts import (
    JSON,
    OpenApiPart,
    Schema,
    error_responses,
    ok_response,
    operation,
    response_headers,
)


def _gateway_paths() -> Schema:
    """The gateway's own routes under /v1/, whatever client APIs it serves."""
    return {
        "/v1/key/info": {
            "get": operation(
                "The caller's key: its limits and its team's, what remains of each now (spends "
                "none of it), and its usage today and this month",
                {**ok_response(key_info.schema()), **error_responses(401, 503)},
                "apiKey",
                tags=["openai"],
            )
        },
    }


def _operations_paths() -> Schema:
    not_ready = {
        "503": {
            "description": "Not ready: the probe's own body, not an error envelope.",
            "headers": response_headers(),
            "content": {JSON: {"schema": s.readiness()}},
        }
    }
    return {
        "/metrics": {
            "get": operation("Prometheus metrics", ok_response({"type": "string"}, media="text/plain"), None)
        },
        "/": {
            "get": operation(
                "Where things are: the client API paths, and the console, admin API and metrics "
                "on the listener that serves them",
                ok_response({"type": "object"}),
                None,
            )
        },
        "/healthz": {"get": operation("Alive", ok_response({"type": "object"}), None)},
        "/readyz": {
            "get": operation(
                "Ready: Redis answers, and some model has a healthy endpoint (or discovered pools)",
                {**ok_response(s.readiness(), "Ready"), **not_ready},
                None,
            )
        },
        "/openapi.json": {"get": operation("This document", ok_response({"type": "object"}), None)},
    }


def document(apis: Sequence[OpenApiPart]) -> Schema:
    """A fresh copy each call: callers may edit it. `apis`: each client API's part (gateway.apis),
    handed down by the app."""
    api_paths: Schema = {}
    api_schemas: Schema = {}
    api_security: Schema = {}
    for part in apis:
        for path, item in part.paths().items():
            # Two APIs may share a path with different methods (OpenAI's GET and Gemini's POST
            # of /v1/models/{model}): their operations merge.
            api_paths.setdefault(path, {}).update(item)
        api_schemas.update(part.schemas())
        api_security.update(part.security_schemes())
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Sluicegate",
            "version": "0.1.0",
            "description": "An OpenAI-compatible gateway for self-hosted LLMs, and its admin API. "
            "Every error, on every route, is the `Error` envelope.",
        },
        "paths": {**api_paths, **_gateway_paths(), **admin_paths(), **_operations_paths()},
        "components": {
            "schemas": {"Error": s.error(), **api_schemas},
            "parameters": {
                "RequestId": {
                    "name": "x-request-id",
                    "in": "header",
                    "required": False,
                    "schema": {"type": "string"},
                    "description": "Your own id, echoed back: up to 128 of A-Za-z0-9._:- (else ignored).",
                },
                "Priority": {
                    "name": "x-sluicegate-priority",
                    "in": "header",
                    "required": False,
                    "schema": {"type": "string"},
                    "description": "A lower priority band (1-9) for this request when its pool is "
                    "saturated: it can only lower the key's and team's band; anything else is ignored.",
                },
                "Deadline": {
                    "name": "x-sluicegate-deadline-ms",
                    "in": "header",
                    "required": False,
                    "schema": {"type": "string", "pattern": "^[0-9]{1,8}$"},
                    "description": "Milliseconds (1 to 86400000, a day) this request can wait for its first "
                    "token: in a saturated pool it goes before its team's requests with later deadlines, "
                    "and one that cannot get a slot in time is refused at once (503 "
                    "deadline_unreachable). Anything else is a 400 naming the header.",
                },
            },
            "securitySchemes": {
                "apiKey": {"type": "http", "scheme": "bearer", "description": "A key from the admin API."},
                "apiKeyHeader": {
                    "type": "apiKey",
                    "in": "header",
                    "name": "x-api-key",
                    "description": "The same key, as Anthropic's SDKs send it.",
                },
                "adminToken": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "SLUICEGATE_ADMIN_TOKEN, or an access token (a JWT) from the IdP "
                    "of SLUICEGATE_OIDC_ISSUER (docs/access.md).",
                },
                **api_security,
            },
        },
    }


def route(apis: Sequence[OpenApiPart]) -> Route:
    """Encoded once per app: the document depends on nothing that changes while it runs."""
    body = orjson.dumps(document(apis))

    async def openapi_json(request: Request) -> Response:
        return Response(body, media_type=JSON)

    return Route("/openapi.json", openapi_json, methods=["GET"])


__all__ = ["document", "route"]
