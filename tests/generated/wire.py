"""Raw HTTP for the generated suite, and what every answer must look like: below 500, and every
refusal in the OpenAI error envelope with one of the gateway's own codes."""

from __future__ import annotations

import http.client
import json
import urllib.parse

from gateway.apis.anthropic.errors import ERROR_TYPES as ANTHROPIC_ERROR_TYPES
from gateway.apis.gemini.errors import STATUSES as GOOGLE_STATUSES
from gateway.errors import ErrorCode

WIRE_CODES = frozenset(code.wire_code for code in ErrorCode)
ANTHROPIC_PATHS = frozenset({"/v1/messages", "/v1/messages/count_tokens"})


def assert_answer(status: int, body: bytes, what: str, *, path: str = "", method: str = "") -> None:
    """Below 500, and a refusal in the envelope with one of the gateway's own codes (in
    Anthropic's envelope, with one of its types, on the Anthropic routes)."""
    shown = f"{what}: {status} {body[:300]!r}"
    assert status < 500, shown
    if status < 400:
        return
    try:
        envelope = json.loads(body)
    except ValueError:
        raise AssertionError(f"not JSON: {shown}") from None
    assert isinstance(envelope, dict), shown
    if path.split("?")[0] in ANTHROPIC_PATHS:
        assert set(envelope) == {"type", "error"}, shown
        assert envelope["type"] == "error", shown
        assert set(envelope["error"]) == {"type", "message"}, shown
        assert envelope["error"]["type"] in ANTHROPIC_ERROR_TYPES, shown
        assert isinstance(envelope["error"]["message"], str), shown
        assert envelope["error"]["message"], shown
        return
    assert set(envelope) == {"error"}, shown
    error = envelope["error"]
    if _is_gemini(method, path.split("?")[0]):
        assert set(error) - {"details"} == {"code", "message", "status"}, shown
        assert (error["code"], error["status"] in GOOGLE_STATUSES) == (status, True), shown
        assert isinstance(error["message"], str), shown
        assert error["message"], shown
        return
    assert set(error) == {"message", "type", "param", "code"}, shown
    assert isinstance(error["message"], str), shown
    assert error["message"], shown
    assert isinstance(error["type"], str), shown
    assert error["param"] is None or isinstance(error["param"], str), shown
    assert error["code"] in WIRE_CODES, shown


def _is_gemini(method: str, path: str) -> bool:
    """Google's envelope: under /v1beta/, or a POST under /v1/models/ (Gemini's model methods;
    GET is OpenAI's)."""
    return path.startswith("/v1beta/") or (method == "POST" and path.startswith("/v1/models/"))


def send(
    base_url: str,
    method: str,
    path: str,
    body: bytes | None,
    headers: list[tuple[str, bytes]],
    timeout_s: float,
) -> tuple[int, dict[str, str], bytes]:
    """One request on its own connection, headers exactly as given (repeats and odd bytes too).
    A gateway that does not answer within `timeout_s` raises TimeoutError: the test fails."""
    url = urllib.parse.urlsplit(base_url)
    conn = http.client.HTTPConnection(url.hostname or "", url.port, timeout=timeout_s)
    try:
        conn.putrequest(method, path, skip_accept_encoding=True)
        for name, value in headers:
            conn.putheader(name, value)
        conn.putheader("content-length", str(len(body or b"")))
        conn.endheaders(body)
        response = conn.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        conn.close()
