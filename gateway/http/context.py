"""What one request has learned about itself, shared by the handler, the access log and metrics."""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from starlette.types import Scope

if TYPE_CHECKING:
    from gateway.errors import GatewayError
    from gateway.observability.tracing import RequestTrace

_CLIENT_REQUEST_ID_RE = re.compile(r"[A-Za-z0-9._:-]{1,128}")


# nginx's code for "client closed the request": only ever seen in our own logs and metrics.
CLIENT_CLOSED = 499


def client_request_id(header: str | None) -> str | None:
    """The client's own id when it is safe to echo and log. Only echoed, logged and passed on:
    a client chooses it, so it never keys anything that must be unique."""
    if header and _CLIENT_REQUEST_ID_RE.fullmatch(header):
        return header
    return None


def new_request_id() -> str:
    """The gateway's id for one request: the settlement marker, the concurrency slot, the usage
    record and the worker's x-request-id. As unique as uuid4().hex, without a UUID object."""
    return os.urandom(16).hex()


@dataclass(slots=True)
class RequestContext:
    request_id: str
    client_request_id: str | None = None
    api: str = ""
    started: float = field(default_factory=time.perf_counter)
    status: int = 0
    model: str = ""
    team: str = ""
    key_id: str = ""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    outcome: str = ""
    # Set by the pipeline where it learns them (the worker that answered, after upstream.open;
    # the first output and finish reason, by Settlement.finish), for the access log and the span.
    served_by_model: str = ""  # the model that answered: the one asked for, or a fallback
    endpoint: str = ""  # the worker endpoint's URL
    served_by: str = ""  # "overflow:<provider>" when an external provider answered (gateway/overflow/)
    attempts: int = 0  # worker attempts, retries included
    ttft_ms: float | None = None  # a stream's first output, from the request's start
    finish_reason: str = ""
    refused_by: tuple[str, str] | None = None  # (limit, scope) of the limit that refused: a 429
    # For the access log: the model the body named, as soon as it is parsed (`model` is only set
    # once the name resolves, and is a metric label, so it is never the client's raw text)...
    requested_model: str = ""
    # ...the code and param of the error the client got (a refusal, or a failure before the
    # answer began), and which session value placed the request (gateway/routing/session.py).
    error_code: str = ""
    error_param: str = ""
    session_id: str | None = None
    session_source: str = ""
    trace: RequestTrace | None = None  # None unless tracing is on (gateway/observability/tracing.py)
    ignored: tuple[str, ...] = ()  # what the translation dropped (gateway.proxy.translation.ignored)
    # A batch line run by the gateway itself (gateway/batch/engine.py): metered as api `batch`,
    # priced with the model's batch multiplier, never queued in a pool.
    batch: bool = False
    # A batch line whose answer was dropped: its lease had gone to another replica, which runs the
    # line again and is billed for it (gateway/batch/runner.py). Settled as using nothing.
    unbilled: bool = False

    def answered_with(self, error: GatewayError) -> None:
        """Notes the error the client is answered with, for the access log."""
        self.error_code = error.code.wire_code
        self.error_param = error.param or ""

    @staticmethod
    def of(scope: Scope) -> RequestContext:
        ctx: RequestContext = scope["state"]["ctx"]
        return ctx
