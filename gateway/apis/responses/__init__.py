"""OpenAI Responses, translated to the worker's chat contract (or forwarded to a native pool),
and the stored-response routes: the OpenAI SDKs' key comes as `Authorization: Bearer`."""

from __future__ import annotations

from gateway.apis.responses.call import LISTS
from gateway.apis.responses.dialect import RESPONSES
from gateway.apis.responses.openapi import OPENAPI
from gateway.apis.responses.routes import routes
from gateway.apis.responses.stored import SIDE_ROUTES
from gateway.apis.spec import ClientApi
from gateway.keys.credentials import BEARER

# Responses' tool types a worker cannot run (OpenAI's hosted ones, and shapes the chat contract
# lacks): dropped, or refused where the model says `hosted_tools: refuse`
# (gateway.proxy.translation.tool_names).
HOSTED_TOOLS = frozenset(
    {
        "web_search",
        "web_search_preview",
        "web_search_preview_2025_03_11",
        "web_search_2025_08_26",
        "file_search",
        "code_interpreter",
        "image_generation",
        "computer_use",
        "computer_use_preview",
        "computer",
        "mcp",
        "local_shell",
        "shell",
        "apply_patch",
        "tool_search",
        "custom",
    }
)

API = ClientApi(
    name="responses",
    operations={RESPONSES.name: "chat"},
    credentials=(BEARER,),
    routes=routes,
    openapi=OPENAPI,
    paths=("/v1/",),
    side_routes=SIDE_ROUTES,
    body_lists=LISTS,
    hosted_tools=HOSTED_TOOLS,
)
