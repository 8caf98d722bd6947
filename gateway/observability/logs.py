"""Logging set-up. Handlers and messages never carry a key: the code logs key ids only, and a
redacting filter on every handler catches anything shaped like a key or a bearer token anyway."""

from __future__ import annotations

import logging
import re

from gateway.keys.store import SECRET_RE

_BEARER_RE = re.compile(r"(?i)(bearer\s+)[^\s\"',]+")


def loggable(text: str) -> str:
    """A client-chosen value as it may appear in a log line: a decoded newline (or any other
    control character) escaped, so it cannot forge a line of its own."""
    return text if text.isprintable() else text.encode("unicode_escape").decode("ascii")


def redact(text: str) -> str:
    return _BEARER_RE.sub(r"\1[redacted]", SECRET_RE.sub("sk-sg-[redacted]", text))


class RedactingFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return redact(super().format(record))


def configure_logging(level: str) -> None:
    handler = logging.StreamHandler()
    handler.setFormatter(RedactingFormatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # uvicorn's own access log duplicates ours and lacks the request id.
    logging.getLogger("uvicorn.access").disabled = True
    for name in ("uvicorn", "uvicorn.error"):
        logging.getLogger(name).handlers[:] = []
        logging.getLogger(name).propagate = True
