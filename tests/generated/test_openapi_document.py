"""The OpenAPI document stays true: it names exactly the routes the app serves, it is valid
OpenAPI 3.1, and the gateway serves it as built."""

from __future__ import annotations

import json
import re

from openapi_spec_validator import validate
from starlette.routing import Mount, Route

from gateway.apis.openapi import document
from gateway.app import create_app
from gateway.config import Settings
from tests.conftest import default_table
from tests.generated.conftest import Live
from tests.generated.wire import send


def _app_operations() -> set[tuple[str, str]]:
    # Built, never started: routes exist before the lifespan connects to anything.
    app = create_app(Settings(), default_table("http://127.0.0.1:9"))
    operations = set()
    for route in app.routes:
        if isinstance(route, Mount) and route.path == "/admin/ui":
            continue  # the web console's HTML pages (gateway/console/): not API operations
        if isinstance(route, Mount) and route.path == "/scim/v2":
            continue  # SCIM (RFC 7644, gateway/scim/): described by its own discovery endpoints
        assert isinstance(route, Route), route
        # Starlette adds HEAD to every GET route by itself: not an operation of its own.
        # A path convertor (`{model:path}`) is Starlette's, not part of the documented template.
        path = re.sub(r"\{(\w+):\w+\}", r"{\1}", route.path)
        operations |= {(method, path) for method in route.methods or () if method != "HEAD"}
    return operations


def _document_operations() -> set[tuple[str, str]]:
    return {(method.upper(), path) for path, item in document()["paths"].items() for method in item}


def test_the_document_names_every_route_the_app_serves() -> None:
    app, doc = _app_operations(), _document_operations()
    assert app - doc == set(), "routes missing from gateway/edge/openapi.py"
    assert doc - app == set(), "documented operations the app does not serve"


def test_the_document_is_valid_openapi() -> None:
    validate(document())


def test_every_operation_documents_its_errors_in_the_envelope() -> None:
    error_ref = {"$ref": "#/components/schemas/Error"}
    # Anthropic's SDKs read only Anthropic's envelope: its routes answer in it.
    anthropic_ref = {"$ref": "#/components/schemas/AnthropicError"}
    # Google's SDKs read Google's envelope: the Gemini operations answer in it.
    google_ref = {"$ref": "#/components/schemas/GoogleError"}
    for path, item in document()["paths"].items():
        for method, operation in item.items():
            secured = bool(operation["security"])
            # /admin/v1/oidc is public: `sluicegate login` asks it which IdP to use before it can sign in.
            public = path == "/admin/v1/oidc"
            assert secured == (path.startswith(("/v1/", "/v1beta/", "/admin/")) and not public), (
                method,
                path,
            )
            for status, response in operation["responses"].items():
                if status.startswith(("4", "5")) and path != "/readyz":
                    expected = anthropic_ref if path.startswith("/v1/messages") else error_ref
                    expected = google_ref if "gemini" in operation.get("tags", ()) else expected
                    assert response["content"]["application/json"]["schema"] == expected, (method, path)
            if secured:
                assert "401" in operation["responses"], (method, path)


def test_the_gateway_serves_the_document(live: Live) -> None:
    status, headers, body = send(live.url, "GET", "/openapi.json", None, [], 10.0)
    assert status == 200
    assert headers["content-type"] == "application/json"
    assert json.loads(body) == document()
