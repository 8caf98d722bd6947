"""The Files and Batch API in front of a real vLLM: the `openai` SDK uploads a file, creates a
batch, polls it and reads the output, each line run by the gateway on the worker. The weights are
random: assert on protocol, counts and metering, never on text."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator

import pytest

from gateway.model_table import NATIVE, ModelConfig, ModelTable, Protocols, Timeouts
from tests.batch.conftest import jsonl, wait_for_batch
from tests.conftest import Gateway, GatewayFactory
from tests.vllm.conftest import SERVED_NAME

CHAT = "tiny-chat"
NATIVE_MODEL = "tiny-native"


@pytest.fixture(scope="module")
def gw(
    make_gateway_module: GatewayFactory, vllm_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Gateway]:
    timeouts = Timeouts(first_token=120, idle=60, total=300)
    table = ModelTable(
        (
            ModelConfig(name=CHAT, upstream_model=SERVED_NAME, endpoints=(vllm_url,), timeouts=timeouts),
            ModelConfig(
                name=NATIVE_MODEL,
                upstream_model=SERVED_NAME,
                endpoints=(vllm_url,),
                timeouts=timeouts,
                protocols=Protocols(responses=NATIVE),
            ),
        )
    )
    files = tmp_path_factory.mktemp("files")
    with make_gateway_module(table, files_url=f"file://{files}", batch_poll_interval_s=0.05) as gateway:
        yield gateway


def _lines(url: str, bodies: list[dict[str, object]]) -> bytes:
    return b"".join(
        json.dumps({"custom_id": f"q{i}", "method": "POST", "url": url, "body": body}).encode() + b"\n"
        for i, body in enumerate(bodies)
    )


@pytest.mark.parametrize(
    ("endpoint", "body"),
    [
        (
            "/v1/chat/completions",
            {"model": CHAT, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 6},
        ),
        ("/v1/responses", {"model": NATIVE_MODEL, "input": "Hi", "max_output_tokens": 6}),
    ],
)
def test_a_batch_runs_on_vllm_through_the_sdk(gw: Gateway, endpoint: str, body: dict[str, object]) -> None:
    key = gw.new_key()
    client = gw.client(key["key"], timeout=300)
    content = _lines(endpoint, [body] * 4)
    uploaded = client.files.create(file=("in.jsonl", io.BytesIO(content)), purpose="batch")
    batch = client.batches.create(input_file_id=uploaded.id, endpoint=endpoint, completion_window="24h")  # type: ignore[arg-type]
    done = wait_for_batch(client, batch.id, within_s=600)
    assert done.status == "completed", done
    assert done.request_counts is not None
    assert (done.request_counts.completed, done.request_counts.failed) == (4, 0)
    assert done.output_file_id is not None
    out = jsonl(client.files.content(done.output_file_id).text)
    assert sorted(line["custom_id"] for line in out) == ["q0", "q1", "q2", "q3"]
    for line in out:
        assert line["response"]["status_code"] == 200
        usage = line["response"]["body"]["usage"]
        assert (usage.get("completion_tokens") or usage.get("output_tokens")) <= 6
    assert done.usage is not None
    assert done.usage.output_tokens > 0
    rows = gw.usage(key["team"])
    assert sum(row["requests"] for row in rows if row.get("api") == "batch") == 4
