"""Console forms: urlencoded bodies parsed here, bounded (no multipart, no python-multipart), and
turned into the same values the admin API takes, so gateway/admin/validation.py and
gateway/limits/spec.py judge them with one set of rules."""

from __future__ import annotations

import urllib.parse
from typing import Any

from starlette.requests import Request

from gateway.errors import ErrorCode, GatewayError
from gateway.http.body import read_body

MAX_FORM_BYTES = 16 * 1024
_MAX_FIELDS = 200
_FORM_TYPE = "application/x-www-form-urlencoded"
# The limit fields each form shows: a team's and a key's (gateway/limits/spec.py decides).
TEAM_FIELDS = ("rpm", "tpm", "max_concurrency", "daily_tokens", "monthly_tokens", "weight")
KEY_FIELDS = ("rpm", "tpm", "max_concurrency", "daily_tokens", "monthly_tokens")


class Form:
    """A parsed form: the last value of a field, or all of them."""

    def __init__(self, pairs: list[tuple[str, str]]) -> None:
        self._pairs = pairs

    def get(self, name: str, default: str = "") -> str:
        values = self.getlist(name)
        return values[-1] if values else default

    def getlist(self, name: str) -> list[str]:
        return [value for key, value in self._pairs if key == name]

    def values(self) -> dict[str, str]:
        """Every field's last value: what a form shown again is filled with."""
        return {key: value for key, value in self._pairs}


async def read_form(request: Request, timeout_s: float) -> Form:
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type != _FORM_TYPE:
        raise GatewayError(ErrorCode.INVALID_REQUEST, f"The console takes forms sent as {_FORM_TYPE}.")
    body = await read_body(request, MAX_FORM_BYTES, timeout_s)
    try:
        text = body.decode("utf-8")
        pairs = urllib.parse.parse_qsl(
            text, keep_blank_values=True, max_num_fields=_MAX_FIELDS, errors="strict"
        )
    except (UnicodeDecodeError, ValueError):
        raise GatewayError(ErrorCode.INVALID_REQUEST, "The form could not be read.") from None
    return Form(pairs)


def whole_number(form: Form, name: str) -> int | None:
    """A number field: blank is None; anything else must be digits (the range is spec.py's)."""
    raw = form.get(name).strip().replace("_", "").replace(",", "")
    if not raw:
        return None
    if not raw.isdigit() or len(raw) > 20:
        raise GatewayError(ErrorCode.INVALID_REQUEST, f"'{name}' must be a whole number.", param=name)
    return int(raw)


def limit_body(form: Form, fields: tuple[str, ...]) -> tuple[dict[str, Any], list[str]]:
    """The admin API's limit fields from a form, and the blank ones (to clear on an edit)."""
    body: dict[str, Any] = {}
    blank: list[str] = []
    for name in fields:
        value = whole_number(form, name)
        if value is None:
            blank.append(name)
        else:
            body[name] = value
    counts = form.get("tpm_counts")
    if counts:
        body["tpm_counts"] = counts
    return body, blank
