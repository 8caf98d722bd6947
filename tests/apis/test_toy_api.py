"""A fifth client API registered with one line, from the test folder (tests/apis/toy_api): a real
gateway in front of the fake worker, exporting its traces to a real OTLP receiver, serves it with
everything the shared layers give an API, each from the API's own declaration (gateway.apis.spec):
request metrics and a SERVER span for its paths, its list fields held to the item bound, its hosted
tools dropped or refused per the model's rule and named in the metric's labels, its side route's
errors in its envelope, and its entry on the landing page. Nothing under gateway/ names it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gateway.apis import APIS
from gateway.model_table import ModelConfig, ModelTable
from gateway.observability.tracing import TracingConfig
from tests.apis import toy_api
from tests.conftest import FAKE_MODEL, Gateway, GatewayFactory, default_table
from tests.http import Reply, get, post
from tests.observability.otlp_receiver import SERVER, Receiver, only, otlp_receiver
from tests.pipeline.support import metric_sum

BOUND = 4  # messages, parts in one message, tools: low, so the bodies stay small
REFUSING = "refusing-model"  # hosted_tools: refuse
GENERATE = "/toy/v1/generate"
GATEWAY_SRC = Path(__file__).resolve().parents[2] / "gateway"


@pytest.fixture(scope="module")
def traces() -> Iterator[tuple[str, Receiver]]:
    with otlp_receiver() as got:
        yield got


@pytest.fixture(scope="module")
def gw(
    make_gateway_module: GatewayFactory, fake_worker: str, traces: tuple[str, Receiver]
) -> Iterator[Gateway]:
    refusing = ModelConfig(
        name=REFUSING, upstream_model=FAKE_MODEL, endpoints=(fake_worker,), hosted_tools="refuse"
    )
    table = ModelTable((*default_table(fake_worker).models, refusing))
    with make_gateway_module(
        table,
        apis=(*APIS, toy_api.API),  # the one line
        tracing=TracingConfig(endpoint=traces[0], schedule_delay_ms=20, sampler_arg=1.0),
        max_messages=BOUND,
        max_content_parts=BOUND,
        max_tools=BOUND,
    ) as gateway:
        yield gateway


def _body(model: str = FAKE_MODEL, /, **counts: int) -> dict[str, Any]:
    """`counts`: how many `turns`, `pieces` in each turn and function `tools` (1, 1, 0)."""
    turns, pieces, tools = counts.get("turns", 1), counts.get("pieces", 1), counts.get("tools", 0)
    return {
        "model": model,
        "turns": [
            {"role": "user", "pieces": [{"text": f"t{i} p{j}"} for j in range(pieces)]} for i in range(turns)
        ],
        "tools": [{"kind": "function", "name": f"f{i}"} for i in range(tools)],
    }


def _send(gw: Gateway, key: str, body: dict[str, Any]) -> Reply:
    return post(gw.url + GENERATE, body, headers={"x-toy-key": key})


def _toy_error(reply: Reply, status: int) -> dict[str, Any]:
    """The error, after checking it is told in the toy API's own envelope."""
    assert reply.status == status, f"HTTP {reply.status}: {reply.body[:300]!r}"
    error: dict[str, Any] = json.loads(reply.body)["toy_error"]
    return error


def test_nothing_in_the_gateway_names_the_toy_api() -> None:
    names = ("/toy/", "toy_search", '"turns"', '"pieces"', "x-toy-key")
    for path in GATEWAY_SRC.rglob("*.py"):
        text = path.read_text()
        assert not [name for name in names if name in text], path


def test_its_requests_are_served_counted_and_traced(gw: Gateway, traces: tuple[str, Receiver]) -> None:
    key = gw.new_key()
    reply = _send(gw, key["key"], _body())
    assert reply.status == 200, reply.body
    answer = reply.json()
    assert answer["model"] == FAKE_MODEL
    assert answer["text"].startswith("tok0 tok1")
    assert metric_sum(gw, "sluicegate_requests_total", api="toy", team=key["team"], code="200") == 1

    server = only(traces[1].by_request_id(reply.headers["x-sluicegate-request-id"]), kind=SERVER)
    assert server.name == f"POST {GENERATE}"
    assert server.attributes["http.route"] == GENERATE
    assert server.attributes["gen_ai.operation.name"] == "chat"  # its `operations`
    assert server.attributes["gen_ai.request.model"] == FAKE_MODEL


def test_its_side_route_answers_and_tells_errors_in_its_envelope(gw: Gateway) -> None:
    key = gw.new_key()
    # Every API's credential is taken on every client route: the Bearer key here.
    listing = get(gw.url + "/toy/v1/models", key=key["key"])
    assert listing.status == 200, listing.body
    assert FAKE_MODEL in listing.json()["models"]
    assert metric_sum(gw, "sluicegate_requests_total", api="toy.models", team=key["team"], code="200") == 1
    error = _toy_error(get(gw.url + "/toy/v1/models"), 401)
    assert error["code"] == "invalid_api_key"
    assert metric_sum(gw, "sluicegate_requests_total", api="toy.models", code="401") == 1


@pytest.mark.parametrize(
    ("over", "param"),
    [
        ({"turns": BOUND + 1}, "turns"),
        ({"pieces": BOUND + 1}, "turns[0].pieces"),
        ({"tools": BOUND + 1}, "tools"),
    ],
)
def test_its_list_fields_are_held_to_the_bounds(gw: Gateway, over: dict[str, int], param: str) -> None:
    key = gw.new_key()["key"]
    at_bound = {name: BOUND for name in over}
    assert _send(gw, key, _body(**at_bound)).status == 200
    error = _toy_error(_send(gw, key, _body(**over)), 400)
    assert f"'{param}'" in error["message"], error
    assert f"at most {BOUND}" in error["message"], error


def test_its_hosted_tools_are_dropped_named_and_counted(gw: Gateway) -> None:
    key = gw.new_key()
    body = _body(tools=1)
    body["tools"].append({"kind": "toy_search"})
    reply = _send(gw, key["key"], body)
    assert reply.status == 200, reply.body
    assert reply.headers["x-sluicegate-ignored"] == "tools[1]:toy_search"
    # A declared hosted tool is a label of its own; an undeclared type would be `tools:other`.
    assert metric_sum(gw, "sluicegate_ignored_fields_total", api="toy", field="tools:toy_search") == 1


def test_a_model_that_refuses_hosted_tools_refuses_its_hosted_tools(gw: Gateway) -> None:
    body = _body(REFUSING)
    body["tools"].append({"kind": "toy_search"})
    error = _toy_error(_send(gw, gw.new_key()["key"], body), 400)
    assert "hosted_tools: refuse" in error["message"]
    assert error["param"] == "tools[0].type"


def test_it_is_on_the_landing_page(gw: Gateway) -> None:
    home = get(gw.url + "/").json()["client_apis"]
    assert home["toy"] == "/toy/v1"
    assert home["openai"] == "/v1"  # the others' stay
