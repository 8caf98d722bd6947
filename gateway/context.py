"""What one request has learned about itself, shared by the handler, the access log and metrics."""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass, field

from starlette.requests import Request

_CLIENT_REQUEST_ID_RE = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")


def request_id_from(header: str | None) -> str:
    """The client's id when it is safe to echo and log; a fresh one otherwise."""
    if header and _CLIENT_REQUEST_ID_RE.match(header):
        return header
    return os.urandom(16).hex()  # as unique as uuid4().hex, without building a UUID object


@dataclass(slots=True)
class RequestContext:
    request_id: str
    started: float = field(default_factory=time.perf_counter)
    status: int = 0
    model: str = ""
    team: str = ""
    key_id: str = ""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    outcome: str = ""

    @staticmethod
    def of(request: Request) -> RequestContext:
        ctx: RequestContext = request.scope["state"]["ctx"]
        return ctx
