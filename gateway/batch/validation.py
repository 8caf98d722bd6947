"""A batch's input file checked line by line before any line runs, in a worker thread (a 200 MB
file parsed on the event loop would stall every request): each line JSON, an object with a
unique `custom_id`, `method: POST`, the batch's `url`, and a body the endpoint takes; one model
for the whole file; at most 50,000 lines. What it finds is OpenAI's `errors.data[]` (with the
1-based `line`); what it keeps is each line's byte span in the file, for the engine's reads.
"""

from __future__ import annotations

import struct
import sys
from array import array
from dataclasses import dataclass, field
from typing import Any

import orjson

from gateway.batch.records import MAX_BATCH_LINES

MAX_ERRORS = 100
# A line longer than this is refused without being held whole (a request body's own limit is
# SLUICEGATE_MAX_BODY_BYTES, 10 MiB by default, checked again when the line runs).
MAX_LINE_BYTES = 16 * 1024 * 1024
MAX_CUSTOM_ID = 512
# The batch's model is its first line's `body.model`, kept in its record and shown in every retrieve
# and listing: a name, not a place for a line's megabytes (a model table's names are far shorter).
MAX_MODEL_NAME = 256
_SPAN = struct.Struct(">QQ")
# What each endpoint's body must hold (the rest is the pipeline's to check when the line runs).
_REQUIRED: dict[str, tuple[str, type | tuple[type, ...]]] = {
    "/v1/chat/completions": ("messages", list),
    "/v1/completions": ("prompt", (str, list)),
    "/v1/embeddings": ("input", (str, list)),
    "/v1/responses": ("input", (str, list)),
}


def span_bytes(start: int, end: int) -> bytes:
    return _SPAN.pack(start, end)


def span_of(raw: bytes) -> tuple[int, int]:
    start, end = _SPAN.unpack(raw)
    return int(start), int(end)


SPAN_SIZE = _SPAN.size


@dataclass
class Validator:
    endpoint: str
    model: str | None = None
    errors: list[dict[str, Any]] = field(default_factory=list)
    spans: array[int] = field(default_factory=lambda: array("Q"))
    _ids: set[str] = field(default_factory=set)
    _rest: bytearray = field(default_factory=bytearray)
    _offset: int = 0  # of _rest's first byte in the file
    _line: int = 0  # 1-based number of the last line read
    _skipping: bool = False  # inside a line too long to keep: dropped up to its newline

    def feed(self, chunk: bytes) -> None:
        self._rest += chunk
        start = 0
        while True:
            end = self._rest.find(b"\n", start)
            if end < 0:
                break
            if self._skipping:
                self._skipping = False
            else:
                self._one(bytes(self._rest[start:end]), self._offset + start)
            start = end + 1
        del self._rest[:start]
        self._offset += start
        if len(self._rest) > MAX_LINE_BYTES:
            if not self._skipping:
                self._line += 1
                self._error("line_too_long", f"A line may hold at most {MAX_LINE_BYTES} bytes.", self._line)
                self._skipping = True
            self._offset += len(self._rest)
            self._rest.clear()

    def finish(self) -> None:
        if self._rest and not self._skipping:
            self._one(bytes(self._rest), self._offset)
            self._rest.clear()
        if not self.spans and not self.errors:
            self._error("empty_file", "The input file holds no requests.", None)
        if len(self.spans) // 2 > MAX_BATCH_LINES:
            self._error(
                "too_many_requests",
                f"A batch may hold at most {MAX_BATCH_LINES} requests; this file holds more.",
                None,
            )

    @property
    def total(self) -> int:
        return len(self.spans) // 2

    def index(self) -> bytes:
        """The spans as big-endian (start, end) pairs of 8 bytes each (`span_of` reads one)."""
        spans = array("Q", self.spans)
        if sys.byteorder == "little":
            spans.byteswap()
        return spans.tobytes()

    def _error(self, code: str, message: str, line: int | None, param: str | None = None) -> None:
        if len(self.errors) < MAX_ERRORS:
            self.errors.append({"code": code, "message": message, "param": param, "line": line})

    def _one(self, raw: bytes, offset: int) -> None:
        self._line += 1
        line = self._line
        if not raw.strip():
            return  # blank lines (a trailing newline, \r\n endings) are not requests
        if self.total >= MAX_BATCH_LINES + 1:
            return  # counted past the limit: finish() says so once
        if len(raw) > MAX_LINE_BYTES:  # its end came in the chunk that took it past the bound
            self._error("line_too_long", f"A line may hold at most {MAX_LINE_BYTES} bytes.", line)
            return
        why = self._check(raw)
        if why is not None:
            code, message, param = why
            self._error(code, message, line, param)
            return
        self.spans.append(offset)
        self.spans.append(offset + len(raw))

    def _check(self, raw: bytes) -> tuple[str, str, str | None] | None:
        try:
            item = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return "invalid_json", "This line is not valid JSON.", None
        if not isinstance(item, dict):
            return "invalid_request", "Each line must be a JSON object.", None
        custom_id = item.get("custom_id")
        if not isinstance(custom_id, str) or not custom_id or len(custom_id) > MAX_CUSTOM_ID:
            return (
                "invalid_request",
                f"'custom_id' must be a string of 1 to {MAX_CUSTOM_ID} characters.",
                "custom_id",
            )
        if custom_id in self._ids:
            return "duplicate_custom_id", "The custom_id of this line is used by another line.", "custom_id"
        self._ids.add(custom_id)
        if item.get("method") != "POST":
            return "invalid_request", "'method' must be POST.", "method"
        if item.get("url") != self.endpoint:
            return "mismatched_url", f"'url' must be the batch's endpoint, {self.endpoint}.", "url"
        body = item.get("body")
        if not isinstance(body, dict):
            return "invalid_request", "'body' must be a JSON object: the request.", "body"
        model = body.get("model")
        if not isinstance(model, str) or not model or len(model) > MAX_MODEL_NAME:
            return (
                "invalid_request",
                f"'body.model' must name the model (at most {MAX_MODEL_NAME} characters).",
                "body.model",
            )
        if self.model is None:
            self.model = model
        elif model != self.model:
            return "mismatched_model", "Every line of a batch must name the same model.", "body.model"
        if body.get("stream"):
            return "invalid_request", "A batch request cannot stream.", "body.stream"
        name, kind = _REQUIRED[self.endpoint]
        if not isinstance(body.get(name), kind):
            return (
                "invalid_request",
                f"'body.{name}' is missing or of the wrong type for {self.endpoint}.",
                f"body.{name}",
            )
        return None
