"""Google's Gemini API (generateContent, streamGenerateContent, countTokens, the model listings),
translated to the worker's chat contract (gateway.apis.gemini.dialect). Google's SDKs and Gemini
CLI send their key as `x-goog-api-key`; `?key=` is Google's other way, never logged (the access
log and spans carry the path only)."""

from __future__ import annotations

from gateway.apis.gemini import errors
from gateway.apis.gemini.dialect import LISTS, NAME
from gateway.apis.gemini.openapi import OPENAPI
from gateway.apis.gemini.routes import SIDE_ROUTES, model_in_path, routes
from gateway.apis.spec import ClientApi
from gateway.edge.unknown_routes import RouteFamily
from gateway.keys.credentials import Credential

# Gemini's tools run by Google's servers (gateway.apis.gemini.tools): dropped, or refused where
# the model says `hosted_tools: refuse`.
HOSTED_TOOLS = frozenset({"googleSearch", "googleSearchRetrieval", "codeExecution", "urlContext"})

API = ClientApi(
    name=NAME,
    operations={NAME: "chat"},
    credentials=(Credential(header="x-goog-api-key"), Credential(query="key")),
    routes=routes,
    openapi=OPENAPI,
    # Its POST model routes under /v1/ too (google-genai 3.x calls /v1/models/...).
    paths=("/v1beta/", "/v1/models/"),
    side_routes=SIDE_ROUTES,
    envelope=errors.error_response,
    body_lists=LISTS,
    hosted_tools=HOSTED_TOOLS,
    home={"gemini": "/v1beta"},
    unknown_routes=RouteFamily(errors.looks_gemini, errors.unknown_route, prefixes=("/v1beta/",)),
    model_in_path=model_in_path,
    encoded_paths=(b"/v1beta/models/",),
    # The Google Cloud project the client bills to: a client's identity at Google, nothing a
    # worker may learn or act on.
    never_forward=frozenset({"x-goog-user-project"}),
)
