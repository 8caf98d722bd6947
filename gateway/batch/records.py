"""What the Files and Batch API keeps about a file and a batch, and how OpenAI shows each.

A file's bytes are in the file store under `team/<team id>/<file id>`; its record, and a batch's,
in Redis under the team's hash tag (gateway/batch/filestore.py, batchstore.py), until `expires_at`.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

MAX_FILE_BYTES = 200 * 1000 * 1000  # OpenAI's batch input limit: 200 MB
MAX_BATCH_LINES = 50_000
ENDPOINTS = ("/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/responses")
PURPOSES = ("batch",)
OUTPUT_PURPOSE = "batch_output"
STATUSES = (
    "validating",
    "failed",
    "in_progress",
    "finalizing",
    "completed",
    "expired",
    "cancelling",
    "cancelled",
)
FINAL = frozenset({"failed", "completed", "expired", "cancelled"})
WINDOWS = {"24h": 24 * 3600}


def new_file_id() -> str:
    return "file-" + secrets.token_hex(12)


def new_batch_id() -> str:
    return "batch_" + secrets.token_hex(12)


def output_file_id(batch_id: str, kind: str) -> str:
    """The output and error files' ids follow from the batch's: a finalize that a dead replica
    left half-done and another redoes writes the same objects and records, never a second set."""
    return f"file-{kind}-{batch_id.removeprefix('batch_')}"


def object_name(team_id: str, file_id: str) -> str:
    return f"team/{team_id}/{file_id}"


@dataclass(frozen=True, slots=True)
class FileRecord:
    id: str
    team_id: str
    size: int  # OpenAI's `bytes`
    created_at: int
    filename: str
    purpose: str
    expires_at: int

    def public(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "file",
            "bytes": self.size,
            "created_at": self.created_at,
            "filename": self.filename,
            "purpose": self.purpose,
            "status": "processed",
            "expires_at": self.expires_at,
            "status_details": None,
        }

    def to_json(self) -> bytes:
        return orjson.dumps(
            {
                "id": self.id,
                "team_id": self.team_id,
                "size": self.size,
                "created_at": self.created_at,
                "filename": self.filename,
                "purpose": self.purpose,
                "expires_at": self.expires_at,
            }
        )

    @classmethod
    def from_json(cls, raw: bytes | str) -> FileRecord:
        return cls(**orjson.loads(raw))


@dataclass(slots=True)
class Batch:
    """A batch as its Redis hash holds it: fixed fields (`spec`) and the ones that move."""

    id: str
    team: str
    team_id: str
    key_id: str
    endpoint: str
    input_file_id: str
    completion_window: str
    model: str
    created_at: int
    expires_at: int  # the completion window's end
    retain_until: int  # the record's own expiry (SLUICEGATE_FILES_RETENTION_S)
    metadata: Mapping[str, str] | None = None
    status: str = "validating"
    total: int = 0
    completed: int = 0
    failed: int = 0
    times: dict[str, int] = field(default_factory=dict)  # in_progress_at, failed_at, ...
    output_file_id: str | None = None
    error_file_id: str | None = None
    errors: list[dict[str, Any]] | None = None
    usage: dict[str, int] = field(default_factory=dict)
    expiring: bool = False  # the completion window ended: lines not started are not run

    SPEC = (
        "id",
        "team",
        "team_id",
        "key_id",
        "endpoint",
        "input_file_id",
        "completion_window",
        "model",
        "created_at",
        "expires_at",
        "retain_until",
        "metadata",
    )

    def spec_json(self) -> bytes:
        return orjson.dumps({name: getattr(self, name) for name in self.SPEC})

    @classmethod
    def from_hash(cls, raw: Mapping[bytes, bytes]) -> Batch:
        spec = orjson.loads(raw[b"spec"])
        batch = cls(**spec)
        batch.status = raw.get(b"status", b"validating").decode()
        batch.total = int(raw.get(b"total", b"0"))
        batch.completed = int(raw.get(b"completed", b"0"))
        batch.failed = int(raw.get(b"failed", b"0"))
        for name, value in raw.items():
            text = name.decode()
            if text.endswith("_at") and text != "created_at":
                batch.times[text] = int(float(value))
            elif text.startswith("usage."):
                batch.usage[text.removeprefix("usage.")] = int(value)
        batch.expiring = b"expiring" in raw
        if raw.get(b"model"):
            batch.model = raw[b"model"].decode()
        if b"output_file_id" in raw:
            batch.output_file_id = raw[b"output_file_id"].decode() or None
        if b"error_file_id" in raw:
            batch.error_file_id = raw[b"error_file_id"].decode() or None
        if b"errors" in raw:
            batch.errors = orjson.loads(raw[b"errors"])
        return batch

    def public(self) -> dict[str, Any]:
        usage = self.usage
        out: dict[str, Any] = {
            "id": self.id,
            "object": "batch",
            "endpoint": self.endpoint,
            "model": self.model or None,
            "errors": None if not self.errors else {"object": "list", "data": self.errors},
            "input_file_id": self.input_file_id,
            "completion_window": self.completion_window,
            "status": self.status,
            "output_file_id": self.output_file_id,
            "error_file_id": self.error_file_id,
            "created_at": self.created_at,
            "in_progress_at": None,
            "expires_at": self.expires_at,
            "finalizing_at": None,
            "completed_at": None,
            "failed_at": None,
            "expired_at": None,
            "cancelling_at": None,
            "cancelled_at": None,
            "request_counts": {"total": self.total, "completed": self.completed, "failed": self.failed},
            "usage": {
                "input_tokens": usage.get("input_tokens", 0),
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": usage.get("output_tokens", 0),
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": usage.get("input_tokens", 0) + usage.get("output_tokens", 0),
            },
            "metadata": dict(self.metadata) if self.metadata is not None else None,
        }
        out.update(self.times)
        return out
