"""Deliberate aborts (`x-fake-fail-after`): the connection dropped mid-stream, as a crashed upstream
drops it, without the server logging it as a failure."""

from __future__ import annotations

import logging


class InjectedAbort(Exception):
    """Raised out of the ASGI app after the response started, on purpose.

    Every ASGI server must then drop the connection without finishing the body; for chunked
    HTTP/1.1 that means no terminating chunk, which is what a crashed upstream looks like.
    """


class HideInjectedAborts(logging.Filter):
    """Drops the server's "Exception in ASGI application" report for an `InjectedAbort`."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info is not None and isinstance(record.exc_info[1], InjectedAbort))
