"""The Files and Batch API as the `openai` SDK calls it, end to end through a real gateway and
the fake worker: upload, create, poll, read the output, cancel; teams kept apart; bad input in
OpenAI's error shape."""

from __future__ import annotations

import io
from typing import Any

import openai
import pytest

from tests.batch.conftest import chat_lines, jsonl, upload, wait_for_batch
from tests.conftest import Gateway, GatewayFactory
from tests.http import post


@pytest.mark.also_on_cluster  # on one Redis and on a Redis Cluster (tests/conftest.py)
def test_a_batch_runs_end_to_end_through_the_sdk(batch_gateway: Gateway) -> None:
    key = batch_gateway.new_key()
    client = batch_gateway.client(key["key"])
    content = chat_lines(5)
    uploaded = client.files.create(file=("in.jsonl", io.BytesIO(content)), purpose="batch")
    assert uploaded.bytes == len(content)
    assert uploaded.purpose == "batch"
    assert client.files.retrieve(uploaded.id).filename == "in.jsonl"
    assert client.files.content(uploaded.id).read() == content

    batch = client.batches.create(
        input_file_id=uploaded.id,
        endpoint="/v1/chat/completions",
        completion_window="24h",
        metadata={"job": "nightly"},
    )
    assert batch.status == "validating"
    assert batch.metadata == {"job": "nightly"}
    done = wait_for_batch(client, batch.id)
    assert done.status == "completed", done
    assert done.request_counts is not None
    assert (done.request_counts.total, done.request_counts.completed, done.request_counts.failed) == (5, 5, 0)
    assert done.output_file_id is not None
    assert done.error_file_id is None
    assert done.completed_at is not None
    assert done.in_progress_at is not None
    out = jsonl(client.files.content(done.output_file_id).text)
    assert sorted(line["custom_id"] for line in out) == [f"r{i}" for i in range(5)]
    for line in out:
        assert line["response"]["status_code"] == 200
        assert line["error"] is None
        assert line["response"]["body"]["choices"][0]["message"]["content"]
    # Metered like any request of the key's team, as api `batch`.
    rows = batch_gateway.usage(key["team"])
    assert sum(row["requests"] for row in rows if row.get("api") == "batch") == 5, rows

    listed = [b.id for b in client.batches.list(limit=1)]
    assert listed == [batch.id]
    files = [f.id for f in client.files.list(purpose="batch")]
    assert files == [uploaded.id]
    # Page by page (the SDK follows `after`): the input and the output file, newest first.
    assert [f.id for f in client.files.list(limit=1)] == [done.output_file_id, uploaded.id]
    assert client.files.delete(uploaded.id).deleted
    with pytest.raises(openai.NotFoundError):
        client.files.retrieve(uploaded.id)


def test_another_teams_files_and_batches_are_404(batch_gateway: Gateway) -> None:
    owner = batch_gateway.client(batch_gateway.new_key()["key"])
    other = batch_gateway.client(batch_gateway.new_key()["key"])
    file_id = upload(owner, chat_lines(1))
    batch = owner.batches.create(
        input_file_id=file_id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    for call in (
        lambda: other.files.retrieve(file_id),
        lambda: other.files.content(file_id),
        lambda: other.files.delete(file_id),
        lambda: other.batches.retrieve(batch.id),
        lambda: other.batches.cancel(batch.id),
        lambda: other.batches.create(
            input_file_id=file_id, endpoint="/v1/chat/completions", completion_window="24h"
        ),
    ):
        with pytest.raises(openai.NotFoundError) as caught:
            call()
        assert caught.value.body["type"] == "not_found_error"  # type: ignore[index]
    assert list(other.batches.list()) == []
    assert list(other.files.list()) == []
    wait_for_batch(owner, batch.id)


def test_malformed_lines_fail_the_batch_with_their_line_numbers(batch_gateway: Gateway) -> None:
    client = batch_gateway.client(batch_gateway.new_key()["key"])
    good = chat_lines(2).splitlines()
    bad = (
        b"\n".join(
            [
                good[0],
                b"{not json",
                good[0],
                chat_lines(1, model="other-model").replace(b'"r0"', b'"x"').strip(),
            ]
        )
        + b"\n"
    )
    batch = client.batches.create(
        input_file_id=upload(client, bad), endpoint="/v1/chat/completions", completion_window="24h"
    )
    done = wait_for_batch(client, batch.id)
    assert done.status == "failed"
    assert done.failed_at is not None
    assert done.errors is not None
    by_line = {error.line: error.code for error in done.errors.data or []}
    assert by_line == {2: "invalid_json", 3: "duplicate_custom_id", 4: "mismatched_model"}


def test_bad_requests_get_openais_error_shape(batch_gateway: Gateway) -> None:
    client = batch_gateway.client(batch_gateway.new_key()["key"])
    file_id = upload(client, chat_lines(1))
    with pytest.raises(openai.BadRequestError) as caught:
        client.batches.create(input_file_id=file_id, endpoint="/v1/moderations", completion_window="24h")
    assert caught.value.body["param"] == "endpoint"  # type: ignore[index]
    with pytest.raises(openai.BadRequestError):
        client.files.create(file=("in.jsonl", io.BytesIO(b"{}")), purpose="fine-tune")
    with pytest.raises(openai.BadRequestError):
        client.batches.create(input_file_id=file_id, endpoint="/v1/chat/completions", completion_window="1h")  # type: ignore[arg-type]
    done = wait_for_batch(
        client,
        client.batches.create(
            input_file_id=file_id, endpoint="/v1/chat/completions", completion_window="24h"
        ).id,
    )
    with pytest.raises(openai.BadRequestError) as caught:
        client.batches.cancel(done.id)
    assert "cannot cancel" in caught.value.message.lower()


def test_a_key_denied_batches_is_refused(batch_gateway: Gateway) -> None:
    client = batch_gateway.client(batch_gateway.new_key(batches=False)["key"])
    with pytest.raises(openai.PermissionDeniedError):
        client.files.list()


def test_without_a_file_store_the_routes_say_which_setting_turns_them_on(
    make_gateway: GatewayFactory,
) -> None:
    with make_gateway() as gw:
        client = gw.client(gw.new_key()["key"])
        with pytest.raises(openai.NotFoundError) as caught:
            client.batches.list()
        assert "SLUICEGATE_FILES_URL" in caught.value.message


@pytest.mark.parametrize(
    "body",
    [
        b"not json",
        b"[]",
        {"input_file_id": "", "endpoint": "/v1/chat/completions", "completion_window": {}},
        {"input_file_id": [], "endpoint": {}, "completion_window": "24h"},
        {
            "input_file_id": "file-x",
            "endpoint": "/v1/chat/completions",
            "completion_window": "24h",
            "metadata": [],
        },
    ],
)
def test_malformed_batch_bodies_are_400s_in_openais_envelope(batch_gateway: Gateway, body: Any) -> None:
    key = batch_gateway.new_key()["key"]
    reply = post(f"{batch_gateway.url}/v1/batches", body, key=key)
    assert reply.status == 400, reply.body
    assert set(reply.json()["error"]) == {"message", "type", "param", "code"}


@pytest.mark.parametrize(
    ("content_type", "body"),
    [
        ("application/json", b"{}"),
        ("multipart/form-data; boundary=XX", b"--XX\r\nno headers end"),
        (
            "multipart/form-data; boundary=XX",
            b'--XX\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nbatch\r\n--XX--\r\n',
        ),
    ],
)
def test_malformed_uploads_are_400s_in_openais_envelope(
    batch_gateway: Gateway, content_type: str, body: bytes
) -> None:
    key = batch_gateway.new_key()["key"]
    reply = post(f"{batch_gateway.url}/v1/files", body, key=key, headers={"content-type": content_type})
    assert reply.status == 400, reply.body
    assert reply.json()["error"]["type"] == "invalid_request_error"
