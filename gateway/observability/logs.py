"""Logging set-up. Handlers and messages never carry a key: the code logs key ids only, and a
redacting filter on every handler catches anything shaped like a key or a bearer token anyway.

Two formats (SLUICEGATE_LOG_FORMAT): `text`, one `time level logger message` line per record, and
`json`, one JSON object per line (`timestamp`, `level`, `logger`, `message`, and the record's
structured fields). A record is structured when it is logged with one mapping as its argument
(`log.info("status=%(status)d", fields)`): the text line is the message formatted from it, the
JSON line carries its fields as they are (numbers as numbers, None as null).
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import re
from collections.abc import Mapping
from typing import Any

from gateway.keys.record import SECRET_RE

LOG_FORMATS = ("text", "json")
_BEARER_RE = re.compile(r"(?i)(bearer\s+)[^\s\"',]+")
_NEEDS_QUOTES = re.compile(r"[\s\"=]")


def loggable(text: str) -> str:
    """A client-chosen value as it may appear in a log line: a decoded newline (or any other
    control character) escaped, so it cannot forge a line of its own."""
    return text if text.isprintable() else text.encode("unicode_escape").decode("ascii")


def redact(text: str) -> str:
    return _BEARER_RE.sub(r"\1[redacted]", SECRET_RE.sub("sk-sg-[redacted]", text))


class Fields(dict[str, Any]):
    """A structured record's fields: in a text line, a missing value (None) reads as `-`, and a
    string with a space, a quote or a `=` in it is written quoted (`user_agent="curl/8 (x)"`), so
    a `key=value` line still splits into its fields. (A JSON line reads the raw values.)"""

    def __getitem__(self, name: str) -> Any:
        value = super().__getitem__(name)
        if value is None:
            return "-"
        if isinstance(value, str) and _NEEDS_QUOTES.search(value):
            return json.dumps(value, ensure_ascii=True)
        return value

    def line(self, template: str) -> str:
        """The text line, formatted once, to log as the message with these fields as its argument
        (`log.info(fields.line(TEMPLATE), fields)`): logging formats `msg % args` again in every
        handler, and with the `%` of the line doubled that leaves it as it is, while a JSON line
        still reads the raw fields."""
        # Rendered into a plain dict first: `template % self` would call __getitem__ (a Python
        # call) once per field of the line.
        shown: dict[str, Any] = {}
        for name, value in self.items():
            if value is None:
                value = "-"
            elif isinstance(value, str) and _NEEDS_QUOTES.search(value):
                value = json.dumps(value, ensure_ascii=True)
            shown[name] = value
        return (template % shown).replace("%", "%%")


class RedactingFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return redact(super().format(record))


class JsonFormatter(logging.Formatter):
    """One JSON object per record, all on one line: json.dumps escapes every control character
    (and, ASCII only, the Unicode line separators), so no value can start a line of its own."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "timestamp": dt.datetime.fromtimestamp(record.created, dt.UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if isinstance(record.args, Mapping):
            fields = dict(record.args.items())  # the raw values: None stays null
            line["message"] = _summary(fields) or record.msg
            for name, value in fields.items():
                line.setdefault(name, value)
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            line["stack"] = self.formatStack(record.stack_info)
        return redact(json.dumps(line, ensure_ascii=True, default=str, separators=(",", ":")))


def _summary(fields: Mapping[str, Any]) -> str | None:
    """A structured access record's message: `POST /v1/chat/completions 200`."""
    if "method" in fields and "path" in fields and "status" in fields:
        return f"{fields['method']} {fields['path']} {fields['status']}"
    return None


def configure_logging(level: str, log_format: str = "text") -> None:
    handler = logging.StreamHandler()
    if log_format == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(RedactingFormatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # uvicorn's own access log duplicates ours and lacks the request id.
    logging.getLogger("uvicorn.access").disabled = True
    for name in ("uvicorn", "uvicorn.error"):
        logging.getLogger(name).handlers[:] = []
        logging.getLogger(name).propagate = True
