"""Review of issue 44: a line's late answer after its lease went elsewhere, isolation after a
key's batches are taken away, and upload bodies without an end."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
import redis

from gateway.apis.batch.upload import MultipartReader, body_chunks
from gateway.batch import service as service_module
from gateway.batch.engine import DEAD_LINES_AT_ONCE, BatchEngine
from gateway.batch.validation import Validator
from gateway.errors import GatewayError
from gateway.model_table import ModelConfig, ModelTable, RoutingConfig
from gateway.redis import keys
from tests.batch.conftest import chat_lines, jsonl, upload, wait_for_batch
from tests.conftest import FAKE_MODEL, Gateway, GatewayFactory
from tests.http import call, post
from tests.servers import run_uvicorn
from tests.waiting import wait_until
from workers.fake.app import create_app as create_fake_worker


class GatedWorker:
    """The fake worker, each request held until the test opens the gate: a line that is running
    for as long as the test needs, without a clock."""

    def __init__(self) -> None:
        self.app = create_fake_worker([FAKE_MODEL])
        self.arrived = threading.Event()
        self.requests = 0
        self.gate = threading.Event()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            self.requests += 1
            self.arrived.set()
            await asyncio.to_thread(self.gate.wait)
        await self.app(scope, receive, send)


@contextlib.contextmanager
def gated_gateway(
    make_gateway: GatewayFactory, files_dir: Path, slots: int = 2
) -> Iterator[tuple[Gateway, GatedWorker]]:
    worker = GatedWorker()
    try:
        with run_uvicorn(worker) as url:
            # 2 slots: batch_share 0.5 (the default) runs one line at a time.
            routing = RoutingConfig(max_inflight_per_endpoint=slots)
            table = ModelTable((ModelConfig(name=FAKE_MODEL, endpoints=(url,), routing=routing),))
            with make_gateway(table, files_url=f"file://{files_dir}", batch_poll_interval_s=0.05) as gw:
                yield gw, worker
    finally:
        worker.gate.set()


def _create(client: openai.OpenAI, lines: int) -> Any:
    file_id = upload(client, chat_lines(lines))
    return client.batches.create(
        input_file_id=file_id, endpoint="/v1/chat/completions", completion_window="24h"
    )


def _create_from(client: openai.OpenAI, content: bytes) -> str:
    file_id = upload(client, content)
    batch = client.batches.create(
        input_file_id=file_id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    return batch.id


def _outcome(gw: Gateway, outcome: str) -> float:
    """Lines this replica ended so (`lost`: its lease was another replica's; `error`: Redis or the
    file store failed)."""
    with urllib.request.urlopen(f"{gw.url}/metrics", timeout=5) as reply:  # noqa: S310
        text = reply.read().decode()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("sluicegate_batch_lines_total{") and f'outcome="{outcome}"' in line
    )


def _assert_batch_billed_as_chat(gw: Gateway, client: openai.OpenAI, team: str) -> None:
    """The team's batch rows bill exactly the tokens of one interactive request of the same line
    (`hello 0`): the batch's single line was billed once."""
    client.chat.completions.create(model=FAKE_MODEL, messages=[{"role": "user", "content": "hello 0"}])
    wait_until(lambda: any(r["api"] == "chat" for r in gw.usage(team)), 10, "the chat row")
    rows = gw.usage(team)
    chat = next(r for r in rows if r["api"] == "chat")
    billed = sum(r["prompt_tokens"] + r["completion_tokens"] for r in rows if r["api"] == "batch")
    assert billed == chat["prompt_tokens"] + chat["completion_tokens"]


def test_a_late_answer_after_the_lease_went_elsewhere_is_not_billed(
    make_gateway: GatewayFactory, files_dir: Path, redis_client: redis.Redis
) -> None:
    """A replica whose lease lapsed while its line still ran (Redis away longer than the lease, a
    stalled loop) gets its answer refused: the replica that took the line over answers and is
    billed. The late answer must not be billed too: the line would cost its team twice."""
    with gated_gateway(make_gateway, files_dir) as (gw, worker):
        key = gw.new_key()
        team = key["team"]
        client = gw.client(key["key"])
        batch = client.batches.create(
            input_file_id=upload(client, chat_lines(1)),
            endpoint="/v1/chat/completions",
            completion_window="24h",
        )
        assert worker.arrived.wait(30)
        _, leases, owners, _, _ = keys.batch_lines(team, batch.id)
        # Another replica took the line over (its lease had lapsed), and holds it now.
        redis_client.hset(owners, "0", "another-replica")
        worker.gate.set()
        wait_until(lambda: _outcome(gw, "lost") >= 1, 30, "the late answer refused")
        # That replica died in turn: its lease lapses, and this one runs the line again.
        redis_client.zadd(leases, {"0": 0})
        done = wait_for_batch(client, batch.id)
        assert (done.status, done.request_counts.completed) == ("completed", 1)
        # An interactive request metered after the batch: every batch row is in by then.
        _assert_batch_billed_as_chat(gw, client, team)


def test_a_key_whose_batches_are_taken_away_runs_no_more_lines(
    make_gateway: GatewayFactory, files_dir: Path
) -> None:
    """`batches: false` set on a key after it created a batch: its lines not yet started fail as
    the key's (as they do when it is revoked), those running finish."""
    with gated_gateway(make_gateway, files_dir) as (gw, worker):
        key = gw.new_key()
        client = gw.client(key["key"])
        batch = client.batches.create(
            input_file_id=upload(client, chat_lines(20)),
            endpoint="/v1/chat/completions",
            completion_window="24h",
        )
        assert worker.arrived.wait(30)
        gw.admin.call("PATCH", f"/admin/v1/keys/{key['id']}", {"batches": False})
        worker.gate.set()
        done = wait_for_batch(gw.client(gw.new_key(team=key["team"])["key"]), batch.id)
        assert done.request_counts is not None
        assert done.request_counts.completed < 20
        assert done.error_file_id is not None
        errors = jsonl(gw.client(gw.new_key(team=key["team"])["key"]).files.content(done.error_file_id).text)
        assert {line["error"]["code"] for line in errors} == {"invalid_api_key"}


def test_a_revoked_keys_lines_are_failed_a_bounded_number_at_a_time(
    make_gateway: GatewayFactory, files_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review of the Batch API: the lines of a batch whose key is revoked all fail as the key's,
    DEAD_LINES_AT_ONCE at a time, not every remaining line claimed (a task each) in one look."""
    engines: list[BatchEngine] = []

    class CountedEngine(BatchEngine):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            engines.append(self)

    monkeypatch.setattr(service_module, "BatchEngine", CountedEngine)
    lines = 4 * DEAD_LINES_AT_ONCE
    with gated_gateway(make_gateway, files_dir) as (gw, worker):
        key = gw.new_key()
        client = gw.client(key["key"])
        batch = _create(client, lines)
        assert worker.arrived.wait(30)  # one line runs (one slot for batches), held
        gw.admin.call("DELETE", f"/admin/v1/keys/{key['id']}")
        worker.gate.set()
        reader = gw.client(gw.new_key(team=key["team"])["key"])
        done = wait_for_batch(reader, batch.id)
        assert done.request_counts is not None
        assert done.request_counts.failed >= lines - 1
        assert done.error_file_id is not None
        errors = jsonl(reader.files.content(done.error_file_id).text)
        assert len(errors) == done.request_counts.failed
        assert {line["error"]["code"] for line in errors} == {"invalid_api_key"}
    (engine,) = engines
    assert engine.started_lines >= lines
    assert engine.peak_look <= DEAD_LINES_AT_ONCE
    # The held line and at most DEAD_LINES_AT_ONCE lines being failed.
    assert engine.peak_lines <= DEAD_LINES_AT_ONCE + 1


def _part(name: str, value: bytes, filename: str | None = None) -> bytes:
    disposition = f'form-data; name="{name}"' + (f'; filename="{filename}"' if filename else "")
    return b"--XX\r\nContent-Disposition: " + disposition.encode() + b"\r\n\r\n" + value + b"\r\n"


_LINES = chat_lines(1)
_BIG = b"x" * 4096


@pytest.mark.parametrize(
    ("body", "why"),
    [
        # A field the gateway does not keep is still a field: small (the SDKs' are a few bytes).
        (
            _part("purpose", b"batch") + _part("expires_after[anchor]", _BIG) + _part("file", _LINES, "a"),
            "long",
        ),
        # A second file would be read (and dropped) for as long as the client sends it.
        (_part("purpose", b"batch") + _part("file", _LINES, "a") + _part("file", _LINES, "b"), "two"),
        (_part("purpose", b"batch") + _part("x", b"1") * 40 + _part("file", _LINES, "a"), "parts"),
        # The file written, then a part whose headers never end: its bytes must not stay behind.
        (_part("purpose", b"batch") + _part("file", _LINES, "a") + b"--XX\r\nContent-Disposition: fo", "end"),
    ],
)
def test_uploads_with_unbounded_or_extra_parts_are_refused_and_leave_nothing(
    batch_gateway: Gateway, files_dir: Path, body: bytes, why: str
) -> None:
    key = batch_gateway.new_key()
    body += b"--XX--\r\n" if why != "end" else b""
    reply = post(
        f"{batch_gateway.url}/v1/files",
        body,
        key=key["key"],
        headers={"content-type": "multipart/form-data; boundary=XX"},
    )
    assert reply.status == 400, reply.body
    assert reply.json()["error"]["type"] == "invalid_request_error"
    assert not [p for p in files_dir.rglob("*") if p.is_file()]


def test_an_upload_body_is_bounded_whatever_its_parts() -> None:
    """Bytes the reader skips (a preamble before the first boundary, a part it drops) count too:
    a body past the bound is cut with a 413, not read for as long as the client sends."""

    async def run() -> int:
        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": b"x" * 65536, "more_body": True}

        reader = MultipartReader(body_chunks(receive, min_rate=1, window_s=30, max_bytes=1 << 20), b"XX")
        with pytest.raises(GatewayError) as caught:
            await reader.next_part()  # a preamble without end
        return caught.value.code.status

    assert asyncio.run(run()) == 413


def test_a_team_recreated_under_the_name_sees_none_of_the_old_teams_batches_in_the_admin_api(
    batch_gateway: Gateway,
) -> None:
    """The admin API (and the console on it) showed and cancelled a deleted team's batches to the
    team that took its name; the client API already answered 404."""
    key = batch_gateway.new_key()
    team = key["team"]
    client = batch_gateway.client(key["key"])
    old = _create(client, 1)
    wait_for_batch(client, old.id)
    batch_gateway.admin.call("DELETE", f"/admin/v1/teams/{team}")
    batch_gateway.admin.call("POST", "/admin/v1/teams", {"name": team})
    for method, path in (("GET", ""), ("POST", "/cancel")):
        reply = call(
            method,
            f"{batch_gateway.url}/admin/v1/batches/{old.id}{path}?team={team}",
            key=batch_gateway.admin_token,
        )
        assert reply.status == 404, reply.body


def test_a_replica_that_takes_back_its_own_lapsed_lease_runs_the_line_once(
    make_gateway: GatewayFactory, files_dir: Path, redis_client: redis.Redis
) -> None:
    """A lease lapsed while its line still ran here (Redis away longer than the lease), and this
    replica's next claim takes the line back, under the same token: the line still running holds
    it again, so no second run of it starts."""
    with gated_gateway(make_gateway, files_dir, slots=4) as (gw, worker):
        key = gw.new_key()
        client = gw.client(key["key"])
        batch = _create(client, 1)
        assert worker.arrived.wait(30)
        leases = keys.batch_lines(key["team"], batch.id)[1]
        redis_client.zadd(leases, {"0": 0})  # lapsed
        wait_until(lambda: redis_client.zscore(leases, "0") != 0, 30, "the line claimed again")
        worker.gate.set()
        done = wait_for_batch(client, batch.id)
        assert (done.status, done.request_counts.completed) == ("completed", 1)
        assert worker.requests == 1


def test_an_uploads_filename_is_kept_as_a_name_not_a_path(batch_gateway: Gateway) -> None:
    client = batch_gateway.client(batch_gateway.new_key()["key"])
    for raw, shown in (
        ("../../etc/in.jsonl", "in.jsonl"),
        ("C:\\data\\in.jsonl", "in.jsonl"),
        ("in\x00\x1b[31m.jsonl", "in[31m.jsonl"),
        ("..", "upload.jsonl"),
    ):
        body = _part("purpose", b"batch") + _part("file", _LINES, raw) + b"--XX--\r\n"
        reply = post(
            f"{batch_gateway.url}/v1/files",
            body,
            key=client.api_key,
            headers={"content-type": "multipart/form-data; boundary=XX"},
        )
        assert reply.status == 200, reply.body
        assert reply.json()["filename"] == shown


def test_a_batch_whose_model_name_is_huge_fails_validation(batch_gateway: Gateway) -> None:
    """The batch's model (its lines' `body.model`) is kept in its record and shown in every
    retrieve and listing: a 1 MB name would make each list page of 100 batches 100 MB."""
    client = batch_gateway.client(batch_gateway.new_key()["key"])
    done = wait_for_batch(client, _create_from(client, chat_lines(2, model="m" * 100_000)))
    assert done.status == "failed"
    assert done.errors is not None
    assert [(e.line, e.param) for e in done.errors.data or []] == [(1, "body.model"), (2, "body.model")]
    assert len(done.model or "") < 1000


def test_an_answer_redis_failed_to_write_is_not_billed(
    make_gateway: GatewayFactory, files_dir: Path, redis_client: redis.Redis
) -> None:
    """Redis fails the write of a line's answer: the line runs again once the lease lapses, and
    that run is billed. The answer that was not written must not be billed too."""
    with gated_gateway(make_gateway, files_dir) as (gw, worker):
        key = gw.new_key()
        team = key["team"]
        client = gw.client(key["key"])
        batch = _create(client, 1)
        assert worker.arrived.wait(30)
        _, leases, _, results, _ = keys.batch_lines(team, batch.id)
        redis_client.set(results, b"not a hash")  # the answer's write fails (WRONGTYPE)
        worker.gate.set()
        # The failed write is a failure of the line's run (given back to retry, or its lease left
        # to lapse): either way it runs again.
        wait_until(lambda: _outcome(gw, "retried") + _outcome(gw, "error") >= 1, 30, "the write failed")
        redis_client.delete(results)
        redis_client.zadd(leases, {"0": 0})  # its lease lapses: the line runs again
        done = wait_for_batch(client, batch.id)
        assert (done.status, done.request_counts.completed) == ("completed", 1)
        _assert_batch_billed_as_chat(gw, client, team)


def test_a_lines_body_has_the_bounds_of_an_interactive_body(
    make_gateway: GatewayFactory, files_dir: Path
) -> None:
    """A line is parsed as a client's request is: a messages list past SLUICEGATE_MAX_MESSAGES is
    refused for it as for an interactive request (the line fails, the batch does not)."""
    with make_gateway(files_url=f"file://{files_dir}", batch_poll_interval_s=0.05, max_messages=4) as gw:
        client = gw.client(gw.new_key()["key"])
        messages = [{"role": "user", "content": "hi"}] * 5
        with pytest.raises(openai.BadRequestError):
            client.chat.completions.create(model=FAKE_MODEL, messages=messages)  # type: ignore[arg-type]
        line = {"custom_id": "big", "method": "POST", "url": "/v1/chat/completions"}
        content = json.dumps({**line, "body": {"model": FAKE_MODEL, "messages": messages}}).encode() + b"\n"
        done = wait_for_batch(client, _create_from(client, content + chat_lines(1)))
        assert done.status == "completed"
        assert (done.request_counts.completed, done.request_counts.failed) == (1, 1)
        assert done.error_file_id is not None
        [error] = jsonl(client.files.content(done.error_file_id).text)
        assert (error["custom_id"], error["response"]["status_code"]) == ("big", 400)


def test_a_line_too_long_is_refused_whatever_chunk_its_end_arrives_in(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A long line whose newline arrives in the chunk that takes it past the bound (the file store
    reads 1 MiB chunks: a 16.5 MiB line ends so) was parsed and kept as a request."""
    monkeypatch.setattr("gateway.batch.validation.MAX_LINE_BYTES", 100)
    long = json.dumps(
        {
            "custom_id": "a",
            "method": "POST",
            "url": "/v1/embeddings",
            "body": {"model": "m", "input": "x" * 90},
        }
    ).encode()
    validator = Validator("/v1/embeddings")
    validator.feed(long[:60])
    validator.feed(long[60:] + b"\n")
    validator.finish()
    assert [(e["line"], e["code"]) for e in validator.errors] == [(1, "line_too_long")]
    assert validator.total == 0
