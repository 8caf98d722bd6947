"""uvicorn's internals, used by the gateway's HTTP server (gateway/edge/server.py) and its draining
shutdown (gateway/edge/draining.py). Pinned in pyproject.toml to the minor version
tests/seams/test_uvicorn.py checked.

What it relies on, and why:
- `uvicorn.protocols.http.httptools_impl`: `HttpToolsProtocol` subclassed (uvicorn builds one per
  connection from the `http=` class), its httptools parser callbacks overridden (`data_received`,
  `on_message_begin`, `on_headers_complete`, `on_body`, `on_message_complete`,
  `on_response_complete`, `timeout_keep_alive_handler`, `send_400_response`; httptools also calls
  `on_chunk_header` and `on_chunk_complete` on it when defined), and its per-connection state read
  (`connections`, `app`, `loop`, `transport`, `scope`, `cycle`, `pipeline`, `flow`,
  `server_state`, `timeout_keep_alive`, `timeout_keep_alive_task`), with `STATUS_LINE` and
  `RequestResponseCycle` (its `send`, `response_complete`). uvicorn bounds neither a request
  head's size nor its time, nor the requests a client pipelines; the gateway does it there.
- `HttpToolsProtocol._unset_keepalive_if_required()`: the keep-alive timer re-armed once the rest
  of a body the app already answered has arrived (`HttpToolsBase.rearm_keep_alive`).
- `uvicorn.Server`'s `servers`, `server_state` (`connections`, `tasks`), `lifespan`, and its
  `on_tick`, `capture_signals`, `handle_exit` and `shutdown` overridden: the drain (stop listening
  after a delay, let open requests finish, then cut them) that uvicorn's shutdown does not do.
"""

from __future__ import annotations

import asyncio
from typing import Protocol

import uvicorn
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol, RequestResponseCycle

# What tests/seams/test_uvicorn.py checks on the installed release.
PROTOCOL_PRIVATES = ("_unset_keepalive_if_required",)
PROTOCOL_STATE = (
    "connections",
    "app",
    "loop",
    "transport",
    "scope",
    "cycle",
    "pipeline",
    "flow",
    "server_state",
    "timeout_keep_alive",
    "timeout_keep_alive_task",
)
PROTOCOL_HOOKS = (
    "connection_made",
    "connection_lost",
    "data_received",
    "on_message_begin",
    "on_headers_complete",
    "on_body",
    "on_message_complete",
    "on_response_complete",
    "timeout_keep_alive_handler",
    "send_400_response",
)
CYCLE_STATE = ("send", "response_complete")
SERVER_STATE = ("servers", "server_state", "lifespan")
SERVER_HOOKS = ("on_tick", "capture_signals", "handle_exit", "shutdown")

__all__ = [
    "Connection",
    "HttpToolsBase",
    "RequestResponseCycle",
    "open_connections",
    "request_tasks",
    "status_line",
]


class HttpToolsBase(HttpToolsProtocol):
    """uvicorn's httptools protocol, with what the gateway's subclass needs of its internals."""

    def rearm_keep_alive(self) -> None:
        """uvicorn's keep-alive timer, armed again from now (the connection is idle)."""
        self._unset_keepalive_if_required()
        self.timeout_keep_alive_task = self.loop.call_later(
            self.timeout_keep_alive, self.timeout_keep_alive_handler
        )


def status_line(status: int) -> bytes:
    """uvicorn's own status line for `status` (`HTTP/1.1 <code> <reason>\\r\\n`)."""
    line: bytes = STATUS_LINE[status]
    return line


class Connection(Protocol):
    def shutdown(self) -> None:
        """Closes once the answer in flight, if any, is complete."""


def open_connections(server: uvicorn.Server) -> list[Connection]:
    """The server's client connections (their protocols), a copy."""
    return list(server.server_state.connections)


def request_tasks(server: uvicorn.Server) -> set[asyncio.Task[None]]:
    """The server's running requests' tasks, uvicorn's own (live) set."""
    return server.server_state.tasks
