"""The app's state, typed: what the lifespan builds (gateway.app) and every request reads.

Starlette copies the lifespan's state into each request's `scope["state"]`; the middleware adds
the request's own record (`ctx`). Read it through `app_state(scope)`, never by a string on the
raw dict: a misspelt key is then a type error, not a KeyError at the first request.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypedDict

if TYPE_CHECKING:
    from starlette.types import Scope

    from gateway.admin.deps import AdminDeps
    from gateway.batch.service import BatchService
    from gateway.config import Settings
    from gateway.console.console_store import ConsoleStore
    from gateway.edge.key_info import KeyInfoDeps
    from gateway.http.context import RequestContext
    from gateway.keys.auth import Principal
    from gateway.observability.tracing import Tracing
    from gateway.proxy.gate import Gate
    from gateway.proxy.pipeline import Pipeline
    from gateway.proxy.upstream import Upstream
    from gateway.redis.health import Readiness
    from gateway.routing.router import Router
    from gateway.routing.stored_responses import StoredResponses


class AppState(TypedDict):
    """What the lifespan yields: one of each, for the app's life."""

    settings: Settings
    pipeline: Pipeline
    gate: Gate
    admin: AdminDeps
    router: Router
    readiness: Readiness  # /readyz's PING
    console_store: ConsoleStore  # the console's sessions, flashes and sign-in flows
    key_info: KeyInfoDeps
    stored: StoredResponses
    upstream: Upstream
    tracing: Tracing | None  # None unless an OTLP endpoint is set
    batch: BatchService | None  # the Files and Batch API; None unless SLUICEGATE_FILES_URL is set


class RequestState(AppState, total=False):
    """A request's copy: the app's, and the request's own record (set by the middleware)."""

    ctx: RequestContext
    # A batch line's caller, known before it runs (gateway/batch/lines.py): the gate takes it
    # instead of reading a key from headers. Never set from anything a client sends.
    principal: Principal


def app_state(scope: Scope) -> RequestState:
    state: RequestState = scope["state"]  # Scope's values are Any: no `cast` call per request
    return state
