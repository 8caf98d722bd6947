"""A tiny raw HTTP client for what the SDK would refuse to send (bad JSON, huge bodies) or hide
(the exact SSE bytes)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


def _send(request: urllib.request.Request, timeout: float) -> Reply:
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310
            return Reply(
                response.status, {k.lower(): v for k, v in response.headers.items()}, response.read()
            )
    except urllib.error.HTTPError as exc:
        with exc:  # an unclosed error response leaks its socket
            return Reply(exc.code, {k.lower(): v for k, v in exc.headers.items()}, exc.read())


def post(
    url: str,
    body: bytes | dict[str, Any],
    *,
    key: str | None = None,
    headers: dict[str, str] | None = None,
    timeout: float = 30,
) -> Reply:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method="POST")  # noqa: S310
    request.add_header("content-type", "application/json")
    if key:
        request.add_header("authorization", f"Bearer {key}")
    for name, value in (headers or {}).items():
        request.add_header(name, value)
    return _send(request, timeout)


def get(url: str, *, key: str | None = None, timeout: float = 30) -> Reply:
    request = urllib.request.Request(url)  # noqa: S310
    if key:
        request.add_header("authorization", f"Bearer {key}")
    return _send(request, timeout)


def sse_data(body: bytes) -> list[bytes]:
    return [block[6:] for block in body.split(b"\n\n") if block.startswith(b"data: ")]


def call(
    method: str, url: str, *, key: str | None = None, body: dict[str, Any] | None = None, timeout: float = 30
) -> Reply:
    """Any method, with an optional JSON body."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method)  # noqa: S310
    if data is not None:
        request.add_header("content-type", "application/json")
    if key:
        request.add_header("authorization", f"Bearer {key}")
    return _send(request, timeout)
