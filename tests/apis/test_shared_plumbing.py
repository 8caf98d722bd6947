"""What every client API shares, seen through real SDKs and raw HTTP against a real gateway:
`x-api-key` as well as a bearer key, `GET /v1/models/{model}`, unknown routes answered in the
caller's own error envelope (naming the routes the gateway serves), and the `api` that metrics
and usage reports are broken down by."""

from __future__ import annotations

import csv
import io
import json
import re
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

import anthropic
import openai
import pytest
import redis
from openai.types.chat import ChatCompletionMessageParam
from prometheus_client.parser import text_string_to_metric_families
from starlette.routing import Route

from gateway.app import create_app
from gateway.config import Settings
from gateway.model_table import ModelConfig, ModelTable
from gateway.redis import keys as redis_keys
from tests.conftest import FAKE_MODEL, OTHER_MODEL, Gateway, GatewayFactory, default_table, worker_record
from tests.http import Reply, post

HELLO: list[ChatCompletionMessageParam] = [{"role": "user", "content": "hi there"}]
CHAT_BODY = {"model": FAKE_MODEL, "messages": HELLO}
SLASHED_MODEL = "org/slashed-model"


def _get(url: str, headers: dict[str, str]) -> Reply:
    request = urllib.request.Request(url, headers=headers)  # noqa: S310 -- a loopback test server
    try:
        with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310
            headers = {k.lower(): v for k, v in response.headers.items()}
            return Reply(response.status, headers, response.read())
    except urllib.error.HTTPError as exc:
        with exc:
            return Reply(exc.code, {k.lower(): v for k, v in exc.headers.items()}, exc.read())


def _anthropic(gw: Gateway, key: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=gw.url, api_key=key, max_retries=0, timeout=30)


def _served_client_routes() -> list[str]:
    """`METHOD /path` of every client route of the app, read from the app as the gateway builds
    it: routes other dialects add are expected in the 404's message without this test changing."""
    app = create_app(Settings(), default_table("http://127.0.0.1:9"))
    out: list[str] = []
    for route in app.routes:
        if isinstance(route, Route) and route.path.startswith("/v1/"):
            path = re.sub(r"\{(\w+):\w+\}", r"{\1}", route.path)
            out.extend(f"{method} {path}" for method in route.methods or () if method != "HEAD")
    return out


# --- x-api-key ------------------------------------------------------------------------------------


def test_x_api_key_is_a_key_on_every_client_route(gateway: Gateway, fake_worker: str) -> None:
    key = gateway.new_key()
    headers = {"x-api-key": key["key"], "anthropic-version": "2023-06-01", "anthropic-beta": "tools-1"}
    reply = post(f"{gateway.url}/v1/chat/completions", CHAT_BODY, headers=headers)
    assert reply.status == 200, reply.body
    assert reply.json()["choices"][0]["message"]["content"]
    # The worker never sees the key, nor Anthropic's protocol headers.
    record = worker_record(fake_worker, reply.headers["x-sluicegate-request-id"])
    assert record is not None
    sent = {name.lower() for name in record["headers"]}
    assert not sent & {"x-api-key", "authorization", "anthropic-version", "anthropic-beta"}, sent

    listing = _get(f"{gateway.url}/v1/models", {"x-api-key": key["key"]})
    assert listing.status == 200
    assert FAKE_MODEL in {m["id"] for m in listing.json()["data"]}
    # The same key twice (some clients send both headers) is one key.
    both = {"x-api-key": key["key"], "authorization": f"Bearer {key['key']}"}
    assert _get(f"{gateway.url}/v1/models", both).status == 200


def test_the_anthropic_sdk_authenticates_with_its_api_key(gateway: Gateway) -> None:
    key = gateway.new_key()
    with _anthropic(gateway, key["key"]) as client:
        model = client.models.retrieve(FAKE_MODEL)
        assert model.id == FAKE_MODEL
        with pytest.raises(anthropic.NotFoundError):
            client.models.retrieve("no-such-model")
    with _anthropic(gateway, "sk-sg-not-a-real-key") as client, pytest.raises(anthropic.AuthenticationError):
        client.models.retrieve(FAKE_MODEL)


def test_two_different_keys_are_refused_whichever_is_valid(gateway: Gateway) -> None:
    mine, theirs = gateway.new_key(), gateway.new_key()
    headers = {"x-api-key": theirs["key"], "authorization": f"Bearer {mine['key']}"}
    reply = post(f"{gateway.url}/v1/chat/completions", CHAT_BODY, headers=headers)
    assert reply.status == 401
    error = reply.json()["error"]
    assert error["code"] == "invalid_api_key"
    assert mine["key"] not in reply.body.decode()
    assert theirs["key"] not in reply.body.decode()
    assert _get(f"{gateway.url}/v1/models", headers).status == 401
    # Neither team paid for the refused request.
    assert gateway.usage(mine["team"]) == []
    assert gateway.usage(theirs["team"]) == []


# Each client API's generating route, its body and its error envelope's readable code.
_GENERATE: dict[str, tuple[str, dict[str, Any], Callable[[Any], str]]] = {
    "chat": ("/v1/chat/completions", CHAT_BODY, lambda e: e["error"]["code"]),
    "messages": (
        "/v1/messages",
        {"model": FAKE_MODEL, "max_tokens": 5, "messages": HELLO},
        lambda e: e["error"]["type"],
    ),
    "responses": ("/v1/responses", {"model": FAKE_MODEL, "input": "hi"}, lambda e: e["error"]["code"]),
    "gemini": (
        f"/v1beta/models/{FAKE_MODEL}:generateContent",
        {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]},
        lambda e: e["error"]["status"],
    ),
}


@pytest.mark.parametrize("api", list(_GENERATE))
def test_refused_keys_are_told_not_to_retry_in_every_api(gateway: Gateway, api: str) -> None:
    """A wrong key, or a model the key may not use, is final: `x-should-retry: false` stops the
    Stainless SDKs (Claude Code's, OpenAI's) from retrying a 401 for minutes (issue 37)."""
    path, body, code = _GENERATE[api]
    wrong = post(f"{gateway.url}{path}", body, headers={"x-api-key": "sk-sg-not-a-real-key"})
    assert wrong.status == 401, wrong.body
    assert code(wrong.json()) in {"invalid_api_key", "authentication_error", "UNAUTHENTICATED"}
    assert wrong.headers.get("x-should-retry") == "false", wrong.headers
    other = gateway.new_key(models=[OTHER_MODEL])["key"]
    refused = post(f"{gateway.url}{path}", body, headers={"x-api-key": other})
    assert refused.status == 403, refused.body
    assert code(refused.json()) in {"model_not_allowed", "permission_error", "PERMISSION_DENIED"}
    assert refused.headers.get("x-should-retry") == "false", refused.headers
    # Only refusals that stay refusals: an answer that may change (an unknown model) says nothing.
    mine = gateway.new_key()["key"]
    unknown = {**body, "model": "no-such-model"} if "model" in body else body
    url = f"{gateway.url}{path.replace(FAKE_MODEL, 'no-such-model')}"
    missing = post(url, unknown, headers={"x-api-key": mine})
    assert missing.status == 404, missing.body
    assert "x-should-retry" not in missing.headers


def test_the_admin_api_takes_only_its_bearer_token(gateway: Gateway) -> None:
    reply = _get(f"{gateway.url}/admin/v1/teams", {"x-api-key": gateway.admin_token})
    assert reply.status == 401
    assert reply.json()["error"]["code"] == "admin_unauthorized"
    # A client key is no admin token, however it is sent.
    key = gateway.new_key()
    for headers in ({"x-api-key": key["key"]}, {"authorization": f"Bearer {key['key']}"}):
        assert _get(f"{gateway.url}/admin/v1/teams", headers).status == 401
    admin = {"authorization": f"Bearer {gateway.admin_token}"}
    assert _get(f"{gateway.url}/admin/v1/teams", admin).status == 200


# --- GET /v1/models/{model} -----------------------------------------------------------------------


def test_models_retrieve_shows_a_model_or_alias_the_key_may_use(gateway: Gateway) -> None:
    client = gateway.client(gateway.new_key()["key"])
    listed = {m.id: m.model_dump() for m in client.models.list()}
    for name in (FAKE_MODEL, "default", OTHER_MODEL):
        model = client.models.retrieve(name)
        assert model.id == name
        assert model.model_dump() == listed[name]  # the same object as its entry in the listing
    with pytest.raises(openai.NotFoundError) as missing:
        client.models.retrieve("no-such-model")
    assert missing.value.code == "model_not_found"


def test_models_retrieve_hides_the_models_a_key_may_not_use(gateway: Gateway) -> None:
    client = gateway.client(gateway.new_key(models=[OTHER_MODEL])["key"])
    assert client.models.retrieve(OTHER_MODEL).id == OTHER_MODEL
    for name in (FAKE_MODEL, "default"):  # the alias of a model it may not use, too
        with pytest.raises(openai.NotFoundError) as hidden:
            client.models.retrieve(name)
        assert hidden.value.code == "model_not_found"
        assert hidden.value.status_code == 404


def test_models_retrieve_takes_a_name_with_a_slash(make_gateway: GatewayFactory, fake_worker: str) -> None:
    table = ModelTable(
        (ModelConfig(name=SLASHED_MODEL, upstream_model=FAKE_MODEL, endpoints=(fake_worker,)),)
    )
    with make_gateway(table) as gw:
        client = gw.client(gw.new_key()["key"])
        # The SDK sends the `/` percent-encoded; the gateway refuses that on any other path.
        assert client.models.retrieve(SLASHED_MODEL).id == SLASHED_MODEL
        assert _get(f"{gw.url}/v1/models/{SLASHED_MODEL}", {"x-api-key": gw.new_key()["key"]}).status == 200
        assert post(f"{gw.url}/admin%2Fv1/teams", {"name": "x"}).status == 400


# --- unknown routes and methods -------------------------------------------------------------------


def test_an_unknown_route_is_a_404_naming_the_routes_the_gateway_serves(gateway: Gateway) -> None:
    routes = _served_client_routes()
    assert "GET /v1/models/{model}" in routes
    reply = post(f"{gateway.url}/v1/chat/completion", CHAT_BODY)  # a typo of a real route
    assert reply.status == 404
    error = reply.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["code"] == "not_found"
    for route in routes:
        assert route in error["message"], route
    client = gateway.client(gateway.new_key()["key"])
    with pytest.raises(openai.NotFoundError) as sdk:
        client.get("/files", cast_to=object)
    assert sdk.value.code == "not_found"


@pytest.mark.parametrize(
    ("path", "headers"),
    [("/v1/messages/unknown", {}), ("/v1/nothing-here", {"anthropic-version": "2023-06-01"})],
    ids=["messages-path", "anthropic-version"],
)
def test_an_unknown_route_an_anthropic_client_calls_is_its_404(
    gateway: Gateway, path: str, headers: dict[str, str]
) -> None:
    reply = post(f"{gateway.url}{path}", {}, headers=headers)
    assert reply.status == 404
    body = reply.json()
    assert body["type"] == "error"
    assert body["error"]["type"] == "not_found_error"
    for route in _served_client_routes():
        assert route in body["error"]["message"], route


def test_the_anthropic_sdk_reads_the_404_of_a_route_the_gateway_lacks(gateway: Gateway) -> None:
    with _anthropic(gateway, gateway.new_key()["key"]) as client:
        with pytest.raises(anthropic.NotFoundError) as missing:
            client.messages.batches.list()
        assert isinstance(missing.value.body, dict)
        assert missing.value.body["error"]["type"] == "not_found_error"
        assert "GET /v1/models" in missing.value.body["error"]["message"]


def test_a_wrong_method_is_a_405_in_the_envelope_with_allow(gateway: Gateway) -> None:
    reply = _get(f"{gateway.url}/v1/chat/completions", {})
    assert reply.status == 405
    assert reply.headers["allow"] == "POST"
    error = reply.json()["error"]
    assert error["code"] == "method_not_allowed"
    assert "POST" in error["message"]


# --- the api in metrics and usage -----------------------------------------------------------------


def _requests_by_api(gw: Gateway, team: str) -> dict[tuple[str, str], float]:
    reply = _get(f"{gw.url}/metrics", {})
    out: dict[tuple[str, str], float] = {}
    for family in text_string_to_metric_families(reply.body.decode()):
        for sample in family.samples:
            if sample.name == "sluicegate_requests_total" and sample.labels["team"] == team:
                out[(sample.labels["api"], sample.labels["code"])] = sample.value
    return out


def test_metrics_and_usage_say_which_api(gateway: Gateway) -> None:
    key = gateway.new_key()
    team = key["team"]
    client = gateway.client(key["key"])
    chat = client.chat.completions.create(model=FAKE_MODEL, messages=HELLO)
    completion = client.completions.create(model=FAKE_MODEL, prompt="hi there", max_tokens=5)
    again = client.completions.create(model=FAKE_MODEL, prompt="hi", max_tokens=5)
    embedding = client.embeddings.create(model=FAKE_MODEL, input="hi there")
    client.models.list()
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="no-such-model", messages=HELLO)

    assert _requests_by_api(gateway, team) == {
        ("chat", "200"): 1,
        ("chat", "404"): 1,
        ("completions", "200"): 2,
        ("embeddings", "200"): 1,
        ("models", "200"): 1,
    }

    told: dict[str, tuple[int, int, int]] = {}  # api -> requests, prompt and completion tokens told
    for api, usage in (
        ("chat", chat.usage),
        ("completions", completion.usage),
        ("completions", again.usage),
        ("embeddings", embedding.usage),
    ):
        assert usage is not None
        requests, prompt, completion_tokens = told.get(api, (0, 0, 0))
        done = getattr(usage, "completion_tokens", 0) or 0
        told[api] = (requests + 1, prompt + usage.prompt_tokens, completion_tokens + done)
    rows = gateway.usage(team)
    assert {r["api"]: (r["requests"], r["prompt_tokens"], r["completion_tokens"]) for r in rows} == told
    assert all(r["key_id"] == key["id"] and r["model"] == FAKE_MODEL for r in rows)

    only = gateway.admin.call("GET", "/admin/v1/usage", team=team, api="completions")["data"]
    assert [(r["api"], r["requests"]) for r in only] == [("completions", 2)]
    text = gateway.admin.call("GET", "/admin/v1/usage", team=team, format="csv")
    assert isinstance(text, str)
    apis = sorted(r["api"] for r in csv.DictReader(io.StringIO(text)))
    assert apis == ["chat", "completions", "embeddings"]
    assert key["id"] not in _get(f"{gateway.url}/metrics", {}).body.decode()


def test_usage_written_before_the_api_existed_stays_in_the_report(
    gateway: Gateway, redis_client: redis.Redis
) -> None:
    key = gateway.new_key()
    team, day = key["team"], "2025-01-31"
    # The layout every earlier version wrote: "<key_id>|<model>|<counter>", no api.
    for counter, value in (("requests", 4), ("prompt_tokens", 40)):
        redis_client.hset(redis_keys.usage_day(team, day), f"{key['id']}|{FAKE_MODEL}|{counter}", value)
    redis_client.sadd(redis_keys.usage_days(team), day)
    gateway.client(key["key"]).chat.completions.create(model=FAKE_MODEL, messages=HELLO)

    rows = gateway.usage(team)
    (before,) = [r for r in rows if r["day"] == day]
    assert before["api"] is None
    assert (before["requests"], before["prompt_tokens"], before["completion_tokens"]) == (4, 40, 0)
    assert [r["api"] for r in rows if r["day"] != day] == ["chat"]
    text = gateway.admin.call("GET", "/admin/v1/usage", team=team, format="csv")
    assert isinstance(text, str)
    by_day = {r["day"]: r for r in csv.DictReader(io.StringIO(text))}
    assert by_day[day]["api"] == ""
    assert by_day[day]["requests"] == "4"
    assert json.loads(json.dumps(rows)) == rows  # JSON-safe as reported
