"""Anthropic Messages (and count_tokens), translated to the worker's chat contract: Anthropic's
SDKs send their key as `x-api-key`, and their protocol headers (`anthropic-version`,
`anthropic-beta`) are the gateway's business, never a worker's."""

from __future__ import annotations

from gateway.apis.anthropic import errors
from gateway.apis.anthropic.dialect import MESSAGES
from gateway.apis.anthropic.openapi import OPENAPI
from gateway.apis.anthropic.request import LISTS
from gateway.apis.anthropic.routes import SIDE_ROUTES, routes, with_request_id
from gateway.apis.spec import ClientApi
from gateway.edge.unknown_routes import RouteFamily
from gateway.keys.credentials import Credential

# Anthropic's server tools, and its client tools defined without a schema (only its models know
# them): dropped, or refused where the model says `hosted_tools: refuse`.
HOSTED_TOOLS = frozenset(
    {
        "web_search_20250305",
        "web_fetch_20250910",
        "code_execution_20250522",
        "code_execution_20250825",
        "bash_20250124",
        "text_editor_20250124",
        "text_editor_20250429",
        "text_editor_20250728",
        "computer_20250124",
        "memory_20250818",
        "tool_search_tool_regex_20251119",
        "tool_search_tool_bm25_20251119",
        "mcp_toolset",
    }
)

API = ClientApi(
    name="anthropic",
    operations={MESSAGES.name: "chat"},
    credentials=(Credential(header="x-api-key"),),
    never_forward=frozenset({"anthropic-version", "anthropic-beta"}),
    routes=routes,
    openapi=OPENAPI,
    paths=("/v1/",),
    side_routes=SIDE_ROUTES,
    envelope=errors.error_response,
    answer_headers=with_request_id,
    body_lists=LISTS,
    hosted_tools=HOSTED_TOOLS,
    home={"anthropic": "/v1/messages"},
    unknown_routes=RouteFamily(errors.looks_anthropic, errors.unknown_route),
)
