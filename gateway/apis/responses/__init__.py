"""OpenAI Responses, translated to the worker's chat contract (or forwarded to a native pool),
and the stored-response routes: the OpenAI SDKs' key comes as `Authorization: Bearer`."""

from __future__ import annotations

from gateway.apis.responses.dialect import RESPONSES
from gateway.apis.responses.openapi import OPENAPI
from gateway.apis.responses.routes import routes
from gateway.apis.spec import ClientApi
from gateway.keys.credentials import BEARER

API = ClientApi(
    name="responses",
    operations={RESPONSES.name: "chat"},
    credentials=(BEARER,),
    routes=routes,
    openapi=OPENAPI,
)
