"""/metrics of a real gateway as Prometheus scrapes it: no `*_created` series, the standard
process_* series, and each refusal counted under the limit that refused (`limit`, `scope`)."""

from __future__ import annotations

import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import FAKE_MODEL, Gateway, GatewayFactory, default_table
from tests.http import get

HELLO: list[ChatCompletionMessageParam] = [{"role": "user", "content": "hi"}]


def _scrape(gw: Gateway) -> str:
    reply = get(f"{gw.url}/metrics")
    assert reply.status == 200
    return reply.body.decode()


def _refused(text: str, team: str) -> dict[tuple[str, str], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "sluicegate_rate_limited_total" and sample.labels["team"] == team:
                assert set(sample.labels) == {"model", "team", "limit", "scope"}
                out[(sample.labels["limit"], sample.labels["scope"])] = sample.value
    return out


def test_no_created_series_and_the_process_series(gateway: Gateway) -> None:
    key = gateway.new_key()
    gateway.client(key["key"]).chat.completions.create(model=FAKE_MODEL, messages=HELLO)
    text = _scrape(gateway)
    names = {s.name for f in text_string_to_metric_families(text) for s in f.samples}
    assert "sluicegate_requests_total" in names
    assert "sluicegate_request_duration_seconds_count" in names
    assert not [n for n in names if n.endswith("_created")]
    assert "_created" not in text
    for name in (
        "process_cpu_seconds_total",
        "process_resident_memory_bytes",
        "process_start_time_seconds",
        "process_open_fds",
        "python_info",
    ):
        assert name in names, name


def test_each_refusal_is_counted_under_the_limit_that_refused(
    make_gateway: GatewayFactory, fake_worker: str
) -> None:
    # The held stream below waits for its first token far longer than any test runs.
    with make_gateway(default_table(fake_worker, first_token=3600)) as gateway:
        _refusals_counted(gateway)


def _refusals_counted(gateway: Gateway) -> None:
    team = gateway.new_team()
    by_rpm = gateway.client(gateway.new_key(team, rpm=1)["key"])
    by_rpm.chat.completions.create(model=FAKE_MODEL, messages=HELLO)
    with pytest.raises(openai.RateLimitError):
        by_rpm.chat.completions.create(model=FAKE_MODEL, messages=HELLO)

    # A stream holds the key's one slot while a second request asks: its role chunk proves it was
    # admitted, its one token takes 10 minutes (the client leaves long before), so the second is
    # refused by concurrency whatever the machine's speed.
    by_slots = gateway.client(gateway.new_key(team, max_concurrency=1)["key"])
    held = by_slots.chat.completions.create(
        model=FAKE_MODEL,
        messages=HELLO,
        stream=True,
        extra_headers={"x-fake-tokens": "1", "x-fake-token-delay-ms": "600000"},
    )
    with held:
        next(iter(held))
        with pytest.raises(openai.RateLimitError, match="concurrent"):
            by_slots.chat.completions.create(model=FAKE_MODEL, messages=HELLO)

    # The team's own limits: its requests per minute, then its daily budget.
    gateway.admin.call("PATCH", f"/admin/v1/teams/{team}", {"rpm": 1})
    free = gateway.client(gateway.new_key(team)["key"])
    free.chat.completions.create(model=FAKE_MODEL, messages=HELLO)
    with pytest.raises(openai.RateLimitError, match="team"):
        free.chat.completions.create(model=FAKE_MODEL, messages=HELLO)
    gateway.admin.call("PATCH", f"/admin/v1/teams/{team}", {"daily_tokens": 1, "clear": ["rpm"]})
    with pytest.raises(openai.RateLimitError, match="budget"):
        free.chat.completions.create(model=FAKE_MODEL, messages=HELLO, max_tokens=1)

    assert _refused(_scrape(gateway), team) == {
        ("rpm", "key"): 1,
        ("concurrency", "key"): 1,
        ("rpm", "team"): 1,
        ("budget", "team"): 1,
    }
