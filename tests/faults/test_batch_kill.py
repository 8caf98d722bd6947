"""A batch survives what takes replicas and Redis down mid-run: every line is answered exactly
once (no line lost, none repeated in the output), and a killed replica's half-run lines are run
again by another, their reservations left to expire unbilled."""

from __future__ import annotations

import collections
import io
import os
import signal
from pathlib import Path

import openai
import pytest

from gateway.dev.embedded_redis import EmbeddedRedis
from tests.batch.conftest import chat_lines, jsonl, metric_values, slow_worker, wait_for_batch
from tests.conftest import FAKE_MODEL
from tests.faults.conftest import GatewayProcess, StartGateway
from tests.waiting import wait_until

LINES = 24


def _models(worker: str) -> str:
    # 4 slots: batch_share 0.5 lets 2 lines run at once on a replica.
    return (
        f"models:\n  - name: {FAKE_MODEL}\n    endpoints: [{{url: '{worker}'}}]\n"
        "    routing: {max_inflight_per_endpoint: 4}\n"
    )


def _settings(files: Path) -> dict[str, str]:
    return {
        "SLUICEGATE_FILES_URL": f"file://{files}",
        "SLUICEGATE_BATCH_LEASE": "2",
        "SLUICEGATE_BATCH_POLL_INTERVAL": "0.05",
    }


def _client(gw: GatewayProcess, team: str) -> openai.OpenAI:
    key = gw.new_key(team)["key"]
    return openai.OpenAI(base_url=f"{gw.url}/v1", api_key=key, max_retries=3)


def _start_batch(client: openai.OpenAI) -> str:
    file_id = client.files.create(file=("in.jsonl", io.BytesIO(chat_lines(LINES))), purpose="batch").id
    return client.batches.create(
        input_file_id=file_id, endpoint="/v1/chat/completions", completion_window="24h"
    ).id


def _team_batch(gw: GatewayProcess, prefix: str) -> tuple[str, openai.OpenAI, str]:
    """A new team on `gw`, its client, and the batch it started."""
    team = prefix + os.urandom(3).hex()
    gw.admin.call("POST", "/admin/v1/teams", {"name": team})
    client = _client(gw, team)
    return team, client, _start_batch(client)


def _exactly_once(client: openai.OpenAI, batch_id: str) -> None:
    done = wait_for_batch(client, batch_id, within_s=120)
    assert done.status == "completed", done
    assert done.request_counts is not None
    assert done.request_counts.completed == LINES
    assert done.output_file_id is not None
    out = jsonl(client.files.content(done.output_file_id).text)
    seen = collections.Counter(line["custom_id"] for line in out)
    assert sorted(seen) == sorted(f"r{i}" for i in range(LINES)), "a line was lost"
    assert max(seen.values()) == 1, f"a line was answered twice: {seen.most_common(3)}"


def _running(gw: GatewayProcess) -> float:
    return sum(metric_values(gw.url, "sluicegate_batch_lines_running{"))


def _completed(client: openai.OpenAI, batch_id: str) -> int:
    counts = client.batches.retrieve(batch_id).request_counts
    return 0 if counts is None else counts.completed


def test_a_replica_killed_mid_batch_loses_and_repeats_no_line(
    start_gateway: StartGateway, own_redis: EmbeddedRedis, tmp_path: Path
) -> None:
    with slow_worker(300) as worker:
        models = _models(worker)
        first = start_gateway(own_redis.url, models=models, **_settings(tmp_path / "files"))
        second = start_gateway(own_redis.url, models=models, **_settings(tmp_path / "files"))
        team, client, batch_id = _team_batch(first, "team-kill-")
        wait_until(lambda: _completed(client, batch_id) >= 2, 60, "lines answered")
        # Killed while it holds lines in flight: their leases lapse, the second replica runs them.
        wait_until(lambda: _running(first) > 0, 30, "a line in flight on the first replica")
        first.process.send_signal(signal.SIGKILL)
        first.process.wait(timeout=10)
        survivor = _client(second, team)
        assert _completed(survivor, batch_id) < LINES
        _exactly_once(survivor, batch_id)
        rows = second.usage(team)
        billed = sum(row["requests"] for row in rows if row.get("api") == "batch")
        # The killed replica's half-run lines were redone, not billed twice.
        assert billed <= LINES, rows


def test_redis_restarted_mid_batch_loses_and_repeats_no_line(
    start_gateway: StartGateway, own_redis: EmbeddedRedis, tmp_path: Path
) -> None:
    with slow_worker(200) as worker:
        gw = start_gateway(own_redis.url, models=_models(worker), **_settings(tmp_path / "files"))
        _, client, batch_id = _team_batch(gw, "team-redis-")
        wait_until(lambda: _completed(client, batch_id) >= 3, 60, "lines answered before the restart")
        # SIGKILL: no shutdown write; the append-only file (appendfsync always) holds every
        # acknowledged write.
        os.kill(own_redis.pid, signal.SIGKILL)
        # Meanwhile the API answers in OpenAI's envelope, a 503 the SDKs retry, never a 500.
        down = openai.OpenAI(base_url=f"{gw.url}/v1", api_key=client.api_key, max_retries=0)
        with pytest.raises(openai.APIStatusError) as caught:
            down.batches.retrieve(batch_id)
        assert caught.value.status_code == 503
        down.close()
        own_redis.stop()
        own_redis.start()
        _exactly_once(client, batch_id)


def test_a_batch_survives_a_gateway_restart(
    start_gateway: StartGateway, own_redis: EmbeddedRedis, tmp_path: Path
) -> None:
    with slow_worker(200) as worker:
        models = _models(worker)
        gw = start_gateway(own_redis.url, models=models, **_settings(tmp_path / "files"))
        team, client, batch_id = _team_batch(gw, "team-restart-")
        wait_until(lambda: _completed(client, batch_id) >= 2, 60, "lines answered before the restart")
        gw.stop()  # SIGTERM, as a rollout stops a pod: its running lines are cut and run again
        again = start_gateway(own_redis.url, models=models, **_settings(tmp_path / "files"))
        _exactly_once(_client(again, team), batch_id)
