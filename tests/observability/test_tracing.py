"""OpenTelemetry traces, end to end: a real gateway driven by the openai SDK, exporting over
OTLP/HTTP to a real receiver on a loopback socket that decodes the protobuf, in front of the fake
worker, which records the traceparent it was sent."""

from __future__ import annotations

import contextlib
import http.client
import json
import secrets
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import openai
import pytest

from gateway.config import Settings
from gateway.errors import ConfigError
from gateway.model_table import ModelConfig, ModelTable, RoutingConfig
from gateway.observability.tracing import TracingConfig
from gateway.observability.tracing_config import DEFAULT_SAMPLE_RATIO
from tests.conftest import FAKE_MODEL, Gateway, GatewayFactory, default_table, worker_record
from tests.observability.otlp_receiver import (
    CLIENT,
    SERVER,
    STATUS_ERROR,
    Receiver,
    children,
    only,
    otlp_receiver,
)
from tests.pipeline.support import metric_samples
from tests.waiting import wait_until

# Text that must never reach a span: what the client asked and what the worker answered.
PROMPT = "the-secret-prompt-" + secrets.token_hex(4)
MESSAGES: list[Any] = [{"role": "user", "content": PROMPT}]


def _traceparent() -> tuple[str, str, str]:
    trace_id, span_id = secrets.token_hex(16), secrets.token_hex(8)
    return trace_id, span_id, f"00-{trace_id}-{span_id}-01"


@pytest.fixture
def receiver() -> Iterator[tuple[str, Receiver]]:
    with otlp_receiver() as got:
        yield got


def _traced(
    make_gateway: GatewayFactory,
    url: str,
    table: ModelTable | None = None,
    *,
    ratio: float = 1.0,
    **overrides: Any,
) -> Any:
    """A gateway exporting to `url` with the default sampler (parent-based, by trace id ratio) at
    `ratio`: 1 (the tests that read a request's spans need every request recorded) or 0, both
    deterministic. A short batch delay so spans arrive while the test runs; the lifespan's end
    flushes the rest."""
    config = TracingConfig(endpoint=url, schedule_delay_ms=20, sampler_arg=ratio)
    assert config.sampler == "parentbased_traceidratio"
    return make_gateway(table, tracing=config, **overrides)


def _worker_saw(fake_worker: str, request_id: str) -> dict[str, str]:
    record = worker_record(fake_worker, request_id)
    assert record is not None, "the worker got no request under the gateway's id"
    headers: dict[str, str] = record["headers"]
    return headers


def _parent(worker_headers: dict[str, str]) -> tuple[str, str, bool]:
    """(trace id, parent span id, sampled) of the traceparent a worker got. A new trace's flags
    may also carry W3C level 2's "random" bit: only the sampled bit is checked."""
    version, trace_id, span_id, flags = worker_headers["traceparent"].split("-")
    assert version == "00"
    return trace_id, span_id, bool(int(flags, 16) & 1)


def test_a_stream_is_one_trace_that_continues_the_clients(
    make_gateway: GatewayFactory, receiver: tuple[str, Receiver], fake_worker: str
) -> None:
    url, got = receiver
    trace_id, client_span, traceparent = _traceparent()
    with _traced(make_gateway, url) as gw:
        key = gw.new_key()
        raw = gw.client(key["key"]).chat.completions.with_raw_response.create(
            model=FAKE_MODEL,
            messages=MESSAGES,
            stream=True,
            stream_options={"include_usage": True},
            extra_headers={"traceparent": traceparent, "tracestate": "vendor=opaque", "x-fake-tokens": "3"},
        )
        chunks = list(raw.parse())
        request_id = raw.headers["x-sluicegate-request-id"]
        spans = got.trace(trace_id)
    usage = chunks[-1].usage
    assert usage is not None

    server = only(spans, kind=SERVER)
    assert server.parent_span_id == client_span, "the client's trace is continued"
    assert server.name == "POST /v1/chat/completions"
    assert server.resource["service.name"] == "sluicegate"
    attributes = server.attributes
    assert attributes["http.route"] == "/v1/chat/completions"
    assert attributes["http.response.status_code"] == 200
    assert attributes["gen_ai.operation.name"] == "chat"
    assert attributes["gen_ai.request.model"] == FAKE_MODEL
    assert attributes["gen_ai.response.model"] == FAKE_MODEL
    assert attributes["gen_ai.usage.input_tokens"] == usage.prompt_tokens
    assert attributes["gen_ai.usage.output_tokens"] == usage.completion_tokens == 3
    assert attributes["gen_ai.response.finish_reasons"] == ["stop"]
    assert attributes["sluicegate.team"] == key["team"]
    assert attributes["sluicegate.api"] == "chat"
    assert attributes["sluicegate.outcome"] == "ok"
    assert attributes["sluicegate.request_id"] == request_id
    assert attributes["client.address"] == "127.0.0.1"

    # Every phase a child of the server span, in order; no queue wait (the pool had room).
    # Authentication and settlement are events on the server span, at their ends.
    phases = children(spans, server)
    assert [s.name for s in phases] == ["admit", f"chat {FAKE_MODEL}"]
    assert len(spans) == 3
    assert server.events == ["authenticate", "settle"]
    assert server.event_attributes == {"authenticate": {}, "settle": {}}
    attempt = phases[1]
    assert attempt.kind == CLIENT
    worker_port = int(fake_worker.rsplit(":", 1)[1])
    assert attempt.attributes["server.address"] == "127.0.0.1"
    assert attempt.attributes["server.port"] == worker_port
    assert attempt.attributes["sluicegate.attempt"] == 1
    assert attempt.attributes["http.response.status_code"] == 200
    assert attempt.events == ["first_byte", "first_token"]
    assert attempt.event_times["first_byte"] <= attempt.event_times["first_token"] <= attempt.end_ns
    # Authenticated before admission; the attempt lasts as long as the answer it relayed, and
    # settlement ends after it.
    assert server.start_ns <= server.event_times["authenticate"] <= phases[0].start_ns
    assert attempt.end_ns <= server.event_times["settle"] <= server.end_ns

    # The worker's parent is the gateway's attempt span, not the client's; tracestate goes along.
    seen = _worker_saw(fake_worker, request_id)
    assert seen["traceparent"] == f"00-{trace_id}-{attempt.span_id}-01"
    assert seen["tracestate"] == "vendor=opaque"


def test_a_whole_answer_without_a_traceparent_starts_a_trace(
    make_gateway: GatewayFactory, receiver: tuple[str, Receiver], fake_worker: str
) -> None:
    url, got = receiver
    with _traced(make_gateway, url) as gw:
        raw = gw.client(gw.new_key()["key"]).chat.completions.with_raw_response.create(
            model="default", messages=MESSAGES, max_tokens=2
        )
        answer = raw.parse()
        request_id = raw.headers["x-sluicegate-request-id"]
        spans = got.by_request_id(request_id)
    server = only(spans, kind=SERVER)
    assert server.parent_span_id == "", "a new trace"
    assert server.attributes["gen_ai.request.model"] == FAKE_MODEL  # the alias, resolved
    assert server.attributes["gen_ai.response.finish_reasons"] == ["length"]
    assert answer.usage is not None
    assert server.attributes["gen_ai.usage.output_tokens"] == answer.usage.completion_tokens == 2
    attempt = only(spans, kind=CLIENT)
    assert attempt.events == ["first_byte"]  # a whole answer has no first token of its own
    assert _parent(_worker_saw(fake_worker, request_id)) == (server.trace_id, attempt.span_id, True)


def test_a_retried_request_shows_each_attempt_and_its_endpoint(
    make_gateway: GatewayFactory, receiver: tuple[str, Receiver], fake_worker: str
) -> None:
    url, got = receiver
    with _busy_worker() as busy:
        busy_port = int(busy.rsplit(":", 1)[1])
        table = ModelTable(
            (
                *default_table(fake_worker).models,
                ModelConfig(name="flaky", endpoints=(busy,), fallbacks=(FAKE_MODEL,)),
            )
        )
        with _traced(make_gateway, url, table) as gw:
            client = gw.client(gw.new_key()["key"])
            raw = client.chat.completions.with_raw_response.create(model="flaky", messages=MESSAGES)
            raw.parse()
            served = got.by_request_id(raw.headers["x-sluicegate-request-id"])
            worker_saw = _worker_saw(fake_worker, raw.headers["x-sluicegate-request-id"])
            # A worker's own 500 is not retried: the client gets a 502 and the server span fails.
            with pytest.raises(openai.InternalServerError) as failed:
                client.chat.completions.create(
                    model=FAKE_MODEL, messages=MESSAGES, extra_headers={"x-fake-status": "500"}
                )
            broken = got.by_request_id(failed.value.response.headers["x-sluicegate-request-id"])

    server = only(served, kind=SERVER)
    assert server.attributes["gen_ai.request.model"] == "flaky"
    assert server.attributes["gen_ai.response.model"] == FAKE_MODEL  # the fallback answered
    first, second = (s for s in children(served, server) if s.kind == CLIENT)
    assert (first.name, second.name) == ("chat flaky", f"chat {FAKE_MODEL}")
    assert first.attributes["server.port"] == busy_port
    assert first.attributes["http.response.status_code"] == 503
    assert first.attributes["error.type"] == "503"
    assert first.status == STATUS_ERROR
    assert second.attributes["server.port"] == int(fake_worker.rsplit(":", 1)[1])
    assert (first.attributes["sluicegate.attempt"], second.attributes["sluicegate.attempt"]) == (1, 2)
    assert _parent(worker_saw) == (server.trace_id, second.span_id, True)

    root = only(broken, kind=SERVER)
    assert root.attributes["http.response.status_code"] == 502
    assert root.attributes["error.type"] == "502"
    assert root.status == STATUS_ERROR
    attempt = only(broken, kind=CLIENT)
    assert attempt.attributes["http.response.status_code"] == 500
    assert attempt.attributes["error.type"] == "500"


def test_a_429_names_the_limit_that_refused(
    make_gateway: GatewayFactory, receiver: tuple[str, Receiver]
) -> None:
    url, got = receiver
    with _traced(make_gateway, url) as gw:
        client = gw.client(gw.new_key(rpm=1)["key"])
        client.chat.completions.create(model=FAKE_MODEL, messages=MESSAGES)
        with pytest.raises(openai.RateLimitError) as refused:
            client.chat.completions.create(model=FAKE_MODEL, messages=MESSAGES)
        spans = got.by_request_id(refused.value.response.headers["x-sluicegate-request-id"])
        with pytest.raises(openai.AuthenticationError) as unknown:
            gw.client("sk-not-a-key").chat.completions.create(model=FAKE_MODEL, messages=MESSAGES)
        rejected = only(
            got.by_request_id(unknown.value.response.headers["x-sluicegate-request-id"]), kind=SERVER
        )
    # A failed authentication is the event's error, and nothing follows it.
    assert rejected.events == ["authenticate"]
    assert rejected.event_attributes["authenticate"] == {"error.type": "invalid_api_key"}
    assert rejected.attributes["http.response.status_code"] == 401
    server = only(spans, kind=SERVER)
    assert server.attributes["http.response.status_code"] == 429
    assert server.attributes["sluicegate.limit"] == "rpm"
    assert server.attributes["sluicegate.limit.scope"] == "key"
    assert server.attributes["sluicegate.outcome"] == "refused"
    assert server.status != STATUS_ERROR, "a 4xx is the client's doing (HTTP semantic conventions)"
    assert "gen_ai.usage.input_tokens" not in server.attributes  # never admitted: nothing metered
    phases = children(spans, server)
    assert [s.name for s in phases] == ["admit"]
    assert phases[0].attributes["error.type"] == "rate_limit_exceeded"
    assert phases[0].status == STATUS_ERROR
    assert server.events == ["authenticate"]  # never admitted: nothing settled


def test_a_request_that_waited_for_a_saturated_pool_has_a_queue_wait_span(
    make_gateway: GatewayFactory, receiver: tuple[str, Receiver], fake_worker: str
) -> None:
    url, got = receiver
    narrow = ModelConfig(
        name="narrow",
        upstream_model=FAKE_MODEL,
        endpoints=(fake_worker,),
        routing=RoutingConfig(max_inflight_per_endpoint=1),
    )
    with _traced(make_gateway, url, ModelTable((narrow,))) as gw:
        key = gw.new_key()["key"]
        # The one slot, held by a request whose worker stalls until its client leaves.
        host, port = gw.url.removeprefix("http://").split(":")
        holder = http.client.HTTPConnection(host, int(port), timeout=30)
        body = json.dumps({"model": "narrow", "messages": MESSAGES})
        holder.request(
            "POST",
            "/v1/chat/completions",
            body=body,
            headers={
                "authorization": f"Bearer {key}",
                "content-type": "application/json",
                "x-fake-stall": "1",
            },
        )
        wait_until(lambda: _inflight(gw) == 1, 20, "the holder took the slot")
        answers: list[Any] = []

        def wait_in_queue() -> None:
            try:
                answers.append(
                    gw.client(key).chat.completions.with_raw_response.create(
                        model="narrow", messages=MESSAGES
                    )
                )
            except openai.APIError as exc:
                answers.append(exc)

        waiter = threading.Thread(target=wait_in_queue)
        waiter.start()
        wait_until(lambda: _queued(gw) == 1, 20, "the second request queued")
        holder.close()  # the holder leaves: its slot goes to the waiter
        waiter.join(timeout=30)
        assert answers, "the queued request was not served"
        assert not isinstance(answers[0], Exception), answers[0]
        spans = got.by_request_id(answers[0].headers["x-sluicegate-request-id"])
    server = only(spans, kind=SERVER)
    names = [s.name for s in children(spans, server)]
    assert names == ["admit", "queue wait", f"chat {FAKE_MODEL}"]
    assert server.events == ["authenticate", "settle"]


@contextlib.contextmanager
def _busy_worker() -> Iterator[str]:
    """A worker that is up (its probes pass: a 404 is "no such route") and answers every request
    503 before any byte: the gateway retries that elsewhere."""

    class Handler(BaseHTTPRequestHandler):
        def _answer(self, status: int) -> None:
            self.rfile.read(int(self.headers.get("content-length") or 0))
            self.send_response(status)
            self.send_header("content-length", "0")
            self.end_headers()

        def do_GET(self) -> None:
            self._answer(404)

        def do_POST(self) -> None:
            self._answer(503)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, name="busy-worker", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def _inflight(gw: Gateway) -> float:
    return sum(value for _, value in metric_samples(gw, "sluicegate_endpoint_inflight"))


def _queued(gw: Gateway) -> float:
    return sum(value for _, value in metric_samples(gw, "sluicegate_pool_queue_depth"))


def test_no_key_key_id_secret_prompt_or_completion_reaches_a_span(
    make_gateway: GatewayFactory, receiver: tuple[str, Receiver]
) -> None:
    url, got = receiver
    with _traced(make_gateway, url) as gw:
        key = gw.new_key(rpm=3)
        client = gw.client(key["key"])
        client.chat.completions.create(model=FAKE_MODEL, messages=MESSAGES)
        list(client.chat.completions.create(model=FAKE_MODEL, messages=MESSAGES, stream=True))
        client.completions.create(model=FAKE_MODEL, prompt=PROMPT)
        with pytest.raises(openai.RateLimitError):
            client.chat.completions.create(model=FAKE_MODEL, messages=MESSAGES)
        with pytest.raises(openai.AuthenticationError):
            gw.client(key["key"] + "x").chat.completions.create(model=FAKE_MODEL, messages=MESSAGES)
        with pytest.raises(openai.NotFoundError):
            client.chat.completions.create(model=key["key"], messages=MESSAGES)
        admin_token = gw.admin_token
    # The gateway is stopped: its lifespan flushed every span.
    spans = got.spans
    assert sum(s.kind == SERVER for s in spans) == 6
    exported = repr([(s.name, s.attributes, s.resource, s.events) for s in spans])
    for forbidden in (key["key"], key["key"][6:20], key["id"], admin_token, PROMPT, "tok0"):
        assert forbidden not in exported


def test_with_no_otlp_endpoint_nothing_is_built_and_the_clients_traceparent_stays_behind(
    make_gateway: GatewayFactory, fake_worker: str
) -> None:
    assert Settings.from_env({}).tracing is None
    _, _, traceparent = _traceparent()
    with make_gateway() as gw:
        assert gw.settings.tracing is None
        raw = gw.client(gw.new_key()["key"]).chat.completions.with_raw_response.create(
            model=FAKE_MODEL,
            messages=MESSAGES,
            extra_headers={"traceparent": traceparent, "tracestate": "a=b"},
        )
        raw.parse()
        seen = _worker_saw(fake_worker, raw.headers["x-sluicegate-request-id"])
        # No span processor (its export thread is the one thing the SDK starts) while it serves.
        assert not [t.name for t in threading.enumerate() if t.name.startswith("OtelBatch")]
    # No span of the gateway's to name, and the client's raw header is never the worker's parent.
    assert not {"traceparent", "tracestate"} & set(seen), seen
    # And the tracing SDK is not even imported by a gateway built without an endpoint. (redis-py
    # imports `opentelemetry.sdk.metrics` for its own optional metrics when the SDK is installed.)
    probe = (
        "import sys\n"
        "from gateway.app import create_app\n"
        "from gateway.cli import load_table\n"
        "from gateway.config import Settings\n"
        "from gateway.model_table import ModelTable\n"
        "create_app(Settings.from_env({}), ModelTable(()))\n"
        "tracing = ('opentelemetry.sdk.trace', 'opentelemetry.exporter')\n"
        "assert not [m for m in sys.modules if m.startswith(tracing)], 'the tracing SDK was imported'\n"
    )
    subprocess.run([sys.executable, "-c", probe], check=True, timeout=60)


@pytest.mark.parametrize(
    ("env", "endpoint"),
    [
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, "http://collector:4318/v1/traces"),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "https://c.example/otlp/"}, "https://c.example/otlp/v1/traces"),
        (
            {
                "OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:4318",
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://b/x",
            },
            "http://b/x",
        ),
    ],
)
def test_the_otlp_endpoint_follows_the_specification(env: dict[str, str], endpoint: str) -> None:
    config = Settings.from_env(env).tracing
    assert config is not None
    assert config.endpoint == endpoint


def test_otel_settings_are_read_and_checked_at_start() -> None:
    base = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}
    config = Settings.from_env(
        {
            **base,
            "OTEL_SERVICE_NAME": "gw-eu",
            "OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
            "OTEL_TRACES_SAMPLER_ARG": "0.25",
            "OTEL_BSP_SCHEDULE_DELAY": "100",
            "OTEL_BSP_MAX_QUEUE_SIZE": "4096",
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
        }
    ).tracing
    assert config is not None
    assert (config.service_name, config.sampler, config.sampler_arg) == (
        "gw-eu",
        "parentbased_traceidratio",
        0.25,
    )
    assert (config.schedule_delay_ms, config.max_queue_size) == (100.0, 4096)
    # The documented default: parent-based, by trace id ratio, at SLUICEGATE_TRACE_SAMPLE_RATIO.
    default = Settings.from_env(base).tracing
    assert default is not None
    assert (default.sampler, default.sampler_arg) == ("parentbased_traceidratio", DEFAULT_SAMPLE_RATIO)
    assert 0 < DEFAULT_SAMPLE_RATIO < 1
    own = Settings.from_env({**base, "SLUICEGATE_TRACE_SAMPLE_RATIO": "1"}).tracing
    assert own is not None
    assert (own.sampler, own.sampler_arg) == ("parentbased_traceidratio", 1.0)
    named = Settings.from_env({**base, "OTEL_TRACES_SAMPLER": "always_on"}).tracing
    assert named is not None
    assert named.sampler == "always_on"
    # A ratio sampler named without its argument samples everything (the specification's default).
    bare = Settings.from_env({**base, "OTEL_TRACES_SAMPLER": "traceidratio"}).tracing
    assert bare is not None
    assert bare.sampler_arg == 1.0
    assert Settings.from_env({**base, "OTEL_SDK_DISABLED": "true"}).tracing is None
    assert Settings.from_env({**base, "OTEL_TRACES_EXPORTER": "none"}).tracing is None
    for bad, name in (
        ({"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, "OTEL_EXPORTER_OTLP_PROTOCOL"),
        ({"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/json"}, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"),
        ({"OTEL_TRACES_SAMPLER": "sometimes"}, "OTEL_TRACES_SAMPLER"),
        ({"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "2"}, "OTEL_TRACES_SAMPLER_ARG"),
        ({"OTEL_BSP_MAX_QUEUE_SIZE": "many"}, "OTEL_BSP_MAX_QUEUE_SIZE"),
        ({"SLUICEGATE_TRACE_SAMPLE_RATIO": "1.5"}, "SLUICEGATE_TRACE_SAMPLE_RATIO"),
        ({"SLUICEGATE_TRACE_SAMPLE_RATIO": "-0.1"}, "SLUICEGATE_TRACE_SAMPLE_RATIO"),
        ({"SLUICEGATE_TRACE_SAMPLE_RATIO": "some"}, "SLUICEGATE_TRACE_SAMPLE_RATIO"),
        (
            {"SLUICEGATE_TRACE_SAMPLE_RATIO": "0.1", "OTEL_TRACES_SAMPLER": "always_on"},
            "SLUICEGATE_TRACE_SAMPLE_RATIO",
        ),
        ({"OTEL_TRACES_EXPORTER": "zipkin"}, "OTEL_TRACES_EXPORTER"),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "collector:4318"}, "OTEL_EXPORTER_OTLP_ENDPOINT"),
    ):
        with pytest.raises(ConfigError, match=name):
            Settings.from_env({**base, **bad})


def test_the_default_sampler_follows_a_clients_decision_and_samples_new_traces_by_ratio(
    make_gateway: GatewayFactory, receiver: tuple[str, Receiver], fake_worker: str
) -> None:
    """Parent-based by trace id ratio: a client's sampled traceparent is recorded even at ratio 0,
    its unsampled one is not even at ratio 1, and a request that starts a trace is recorded by
    the ratio (0 and 1 decide every trace id alike). Whatever the decision, the worker learns it."""
    url, got = receiver
    answers: dict[str, tuple[str, str]] = {}  # case -> (the traceparent sent, the worker's one)
    for ratio in (0.0, 1.0):
        with _traced(make_gateway, url, ratio=ratio) as gw:
            client = gw.client(gw.new_key()["key"])
            for flags in ("01", "00", None):
                trace_id, span_id, _ = _traceparent()
                sent = "" if flags is None else f"00-{trace_id}-{span_id}-{flags}"
                raw = client.chat.completions.with_raw_response.create(
                    model=FAKE_MODEL, messages=MESSAGES, extra_headers={"traceparent": sent} if sent else {}
                )
                raw.parse()
                seen = _worker_saw(fake_worker, raw.headers["x-sluicegate-request-id"])
                answers[f"{ratio} {flags}"] = (sent, seen["traceparent"])
        # The gateway is stopped: its lifespan flushed every span it recorded.
    recorded = {s.trace_id for s in got.spans if s.kind == SERVER}
    for case, (sent, worker) in answers.items():
        case_ratio, case_flags = case.split()
        _, worker_trace, worker_parent, worker_flags = worker.split("-")
        if sent:
            _, trace_id, span_id, _ = sent.split("-")
            assert worker_trace == trace_id, case
            assert worker_parent != span_id, f"{case}: the worker's parent is the gateway's span"
        expected = case_flags == "01" if case_flags != "None" else case_ratio == "1.0"
        assert (worker_trace in recorded) is expected, case
        assert bool(int(worker_flags, 16) & 1) is expected, case
    assert len(recorded) == 3  # (0, sampled parent), (1, sampled parent), (1, no parent)
    # Not recorded is not built: a dropped request exports nothing at all, children included.
    assert {s.trace_id for s in got.spans} == recorded


def test_a_sampled_out_request_exports_nothing_but_still_gives_the_worker_a_parent(
    make_gateway: GatewayFactory, receiver: tuple[str, Receiver], fake_worker: str
) -> None:
    """The client's own sampling decision is kept (parent-based), even with every new trace
    sampled: a trace it did not sample is not exported, and the worker still learns the trace and
    the gateway's span."""
    url, got = receiver
    trace_id, _, _ = _traceparent()
    with _traced(make_gateway, url) as gw:
        client = gw.client(gw.new_key()["key"])
        raw = client.chat.completions.with_raw_response.create(
            model=FAKE_MODEL, messages=MESSAGES, extra_headers={"traceparent": f"00-{trace_id}-{'1' * 16}-00"}
        )
        raw.parse()
        seen = _worker_saw(fake_worker, raw.headers["x-sluicegate-request-id"])
        # A sampled request after it: once its trace arrived, the earlier one would have too.
        marker, _, traceparent = _traceparent()
        client.chat.completions.create(
            model=FAKE_MODEL, messages=MESSAGES, extra_headers={"traceparent": traceparent}
        )
        got.trace(marker)
    assert not [s for s in got.spans if s.trace_id == trace_id]
    version, sent_trace, parent, flags = seen["traceparent"].split("-")
    assert (version, sent_trace, flags) == ("00", trace_id, "00")
    assert parent != "1" * 16, "the worker's parent is the gateway's span"
