"""SCIM's own error envelope (RFC 7644 §3.12): `{"schemas": [...Error], "status": "400",
"scimType": "invalidSyntax", "detail": "..."}`, served as application/scim+json.

An IdP's SCIM client reads this envelope, not the gateway's OpenAI one, so the SCIM endpoint
answers every failure in it, 401 and 404 included. The closed set of failures is scim2-models'
exception hierarchy (`SCIMException`: one class per scimType or status); `ScimError` carries one
with the detail to show. Details name only what the IdP sent or the field at fault: never the
token, never a stored value of another resource.
"""

from __future__ import annotations

from collections.abc import Mapping

import orjson
from pydantic import ValidationError
from scim2_models import (
    Context,
    Error,
    InvalidSyntaxException,
    InvalidValueException,
    SCIMException,
)
from starlette.responses import Response

MEDIA_TYPE = "application/scim+json"


class ScimError(Exception):
    """A SCIM failure to answer: `exc` gives the status and scimType."""

    def __init__(self, exc: SCIMException, headers: Mapping[str, str] | None = None) -> None:
        super().__init__(exc.detail)
        self.exc = exc
        self.headers = dict(headers or {})

    def response(self) -> Response:
        return scim_response(self.exc.to_error(), self.exc.status, headers=self.headers)


def scim_response(body: object, status: int = 200, *, headers: Mapping[str, str] | None = None) -> Response:
    """A SCIM message: a scim2-models object dumped for a response, or a dict already dumped."""
    data = body.model_dump(scim_ctx=Context.RESOURCE_QUERY_RESPONSE) if isinstance(body, Error) else body
    return Response(orjson.dumps(data), status_code=status, media_type=MEDIA_TYPE, headers=headers)


def from_validation(error: ValidationError) -> ScimError:
    """The first failure pydantic found, as SCIM names it. An attribute no schema declares is
    invalidValue (the value the IdP sent has no place here), not the library's invalidSyntax:
    the body is well-formed JSON, and an IdP retries a syntax error forever."""
    first = error.errors()[0]
    if first.get("type") == "extra_forbidden":
        where = ".".join(str(part) for part in first.get("loc", ()))
        return ScimError(InvalidValueException(detail=f"Unknown attribute: {where}"))
    converted = Error.from_validation_errors(error)[0]
    exc = SCIMException.from_error(converted)
    if not exc.scim_type and exc.status == 400:
        exc = InvalidValueException(detail=converted.detail)
    return ScimError(exc)


def invalid_syntax(detail: str) -> ScimError:
    return ScimError(InvalidSyntaxException(detail=detail))


def invalid_value(detail: str) -> ScimError:
    return ScimError(InvalidValueException(detail=detail))
