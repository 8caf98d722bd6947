"""Anthropic Messages (and count_tokens), translated to the worker's chat contract: Anthropic's
SDKs send their key as `x-api-key`, and their protocol headers (`anthropic-version`,
`anthropic-beta`) are the gateway's business, never a worker's."""

from __future__ import annotations

from gateway.apis.anthropic import errors
from gateway.apis.anthropic.dialect import MESSAGES
from gateway.apis.anthropic.openapi import OPENAPI
from gateway.apis.anthropic.routes import routes
from gateway.apis.spec import ClientApi
from gateway.edge.unknown_routes import RouteFamily
from gateway.keys.credentials import Credential

API = ClientApi(
    name="anthropic",
    operations={MESSAGES.name: "chat"},
    credentials=(Credential(header="x-api-key"),),
    never_forward=frozenset({"anthropic-version", "anthropic-beta"}),
    routes=routes,
    openapi=OPENAPI,
    unknown_routes=RouteFamily(errors.looks_anthropic, errors.unknown_route),
)
