"""A claimed line, run and answered: its input read (a ranged read of the batch's file), run
through the pipeline (gateway.batch.lines), and its outcome written exactly once:

    200                                   -> the output file
    a refusal or the worker's 4xx         -> the error file (a budget refusal among them)
    never started (every slot busy, Redis
    or the pool away, the drain)          -> back to the front of the queue, no try counted
    a worker failure (5xx, no answer)     -> back to the queue once; the second time, the error file
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from gateway.batch.batchstore import BatchStore
from gateway.batch.lines import run_line
from gateway.batch.records import Batch, object_name
from gateway.files.storage import FileStorage
from gateway.http.context import RequestContext
from gateway.keys.auth import Principal
from gateway.proxy.dialect import Dialect
from gateway.proxy.pipeline import Pipeline
from gateway.state import AppState

log = logging.getLogger("sluicegate.batch")

# The pipeline's own refusals that mean "not now", not "never": the line was not started.
_NOT_STARTED = frozenset(
    {
        "pool_saturated",
        "queue_timeout",
        "no_healthy_upstream",
        "redis_unavailable",
        "shutting_down",
        "server_busy",
    }
)
WORKER_TRIES = 1  # a worker failure is retried once


@dataclass(frozen=True, slots=True)
class Outcome:
    """What became of a line: 'completed', 'failed', 'requeued', 'retried' or 'lost' (its lease
    went to another replica, which answers it)."""

    kind: str


def output_line(custom_id: str, status: int, request_id: str, body: Any) -> bytes:
    return orjson.dumps(
        {
            "id": "batch_req_" + secrets.token_hex(12),
            "custom_id": custom_id,
            "response": {"status_code": status, "request_id": request_id, "body": body},
            "error": None,
        }
    )


def error_line(custom_id: str, code: str, message: str) -> bytes:
    return orjson.dumps(
        {
            "id": "batch_req_" + secrets.token_hex(12),
            "custom_id": custom_id,
            "response": None,
            "error": {"code": code, "message": message},
        }
    )


def _usage(body: Any) -> tuple[int, int]:
    usage = body.get("usage") if isinstance(body, dict) else None
    if not isinstance(usage, dict):
        return 0, 0
    prompt = usage.get("prompt_tokens", usage.get("input_tokens", 0))
    completion = usage.get("completion_tokens", usage.get("output_tokens", 0))
    return (prompt if isinstance(prompt, int) else 0), (completion if isinstance(completion, int) else 0)


def _error_code(body: Any) -> str:
    error = body.get("error") if isinstance(body, dict) else None
    code = error.get("code") if isinstance(error, dict) else None
    return code if isinstance(code, str) else ""


class LineRunner:
    def __init__(
        self,
        store: BatchStore,
        storage: FileStorage,
        pipeline: Pipeline,
        dialects: Mapping[str, Dialect[Any]],
        token: str,
    ) -> None:
        self._store = store
        self._storage = storage
        self._pipeline = pipeline
        self._dialects = dialects
        self._token = token

    async def read(self, batch: Batch, line: int) -> tuple[str, dict[str, Any]]:
        """The line's custom_id and request body (validated when the batch was)."""
        start, end = await self._store.span(batch.team, batch.id, line)
        parts = [
            chunk
            async for chunk in self._storage.read(
                object_name(batch.team_id, batch.input_file_id), start=start, end=end
            )
        ]
        item = orjson.loads(b"".join(parts))
        return item["custom_id"], item["body"]

    async def fail(self, batch: Batch, line: int, code: str, message: str) -> Outcome:
        """Answers a line with an error without running it."""
        try:
            custom_id, _ = await self.read(batch, line)
        except (FileNotFoundError, ValueError, KeyError):
            custom_id = f"line-{line + 1}"
        written = await self._store.done(
            batch,
            line,
            self._token,
            ok=False,
            value=b"e" + error_line(custom_id, code, message),
            input_tokens=0,
            output_tokens=0,
        )
        return Outcome("failed" if written else "lost")

    async def run(self, batch: Batch, line: int, principal: Principal, state: AppState) -> Outcome:
        try:
            custom_id, body = await self.read(batch, line)
        except FileNotFoundError:
            return await self.fail(batch, line, "input_file_gone", "The batch's input file is gone.")
        if batch.endpoint == "/v1/responses":
            body["store"] = False  # nothing of a batch line is kept on a worker
        dialect = self._dialects[batch.endpoint]
        verdict: list[str] = []

        async def on_answer(status: int, raw: bytes, ctx: RequestContext) -> None:
            try:
                parsed: Any = orjson.loads(raw) if raw else None
            except orjson.JSONDecodeError:
                parsed = None
            if status == 200:
                prompt, completion = _usage(parsed)
                # A line is billed once: by the replica whose answer was written. Until it is
                # (Redis may fail the write, and the line then runs again), it is not billed.
                ctx.unbilled = True
                written = await self._store.done(
                    batch,
                    line,
                    self._token,
                    ok=True,
                    value=b"o" + output_line(custom_id, status, ctx.request_id, parsed),
                    input_tokens=prompt,
                    output_tokens=completion,
                )
                ctx.unbilled = not written
                verdict.append("completed" if written else "lost")
            elif _error_code(parsed) in _NOT_STARTED:
                verdict.append("requeue")
            elif status >= 500:
                verdict.append("retry:" + raw.decode("utf-8", "replace")[:2000])
            else:
                written = await self._store.done(
                    batch,
                    line,
                    self._token,
                    ok=False,
                    value=b"e" + output_line(custom_id, status, ctx.request_id, parsed),
                    input_tokens=0,
                    output_tokens=0,
                )
                verdict.append("failed" if written else "lost")

        answer = await run_line(
            self._pipeline, dialect, batch.endpoint, state, principal, orjson.dumps(body), on_answer
        )
        kind = verdict[0] if verdict else "retry:"
        if kind == "requeue":
            await self._store.release(batch.team, batch.id, line, self._token, retry=False)
            return Outcome("requeued")
        if kind.startswith("retry:"):
            given = await self._store.release(
                batch.team, batch.id, line, self._token, retry=True, tries=WORKER_TRIES
            )
            if given == 1:
                return Outcome("retried")
            if given == 0:
                return Outcome("lost")
            try:
                parsed = orjson.loads(kind.removeprefix("retry:") or b"null")
            except orjson.JSONDecodeError:
                parsed = None
            written = await self._store.done(
                batch,
                line,
                self._token,
                ok=False,
                value=b"e" + output_line(custom_id, answer.status or 502, "", parsed),
                input_tokens=0,
                output_tokens=0,
            )
            return Outcome("failed" if written else "lost")
        return Outcome(kind)
