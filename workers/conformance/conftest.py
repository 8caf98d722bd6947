"""Options and shared exchanges of the worker conformance suite (see workers/CONTRACT.md).

    python -m pytest workers/conformance --worker-url http://127.0.0.1:8011 --worker-model tiny

The worker must be otherwise idle during the run: the load and disconnect rules read its
`vllm:num_requests_running` gauge.
"""

from __future__ import annotations

import json
import os
import re
from collections import defaultdict
from typing import Any

import pytest

from workers.conformance import client, rules
from workers.conformance.client import JSONObject, Reply, Stream, Worker

CHAT_PATH = "/v1/chat/completions"
COMPLETIONS_PATH = "/v1/completions"
SHORT_TOKENS = 8


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("worker", "Sluicegate worker conformance (workers/CONTRACT.md)")
    group.addoption(
        "--worker-url",
        default=os.environ.get("SLUICEGATE_WORKER_URL"),
        help="base URL of the running worker, e.g. http://127.0.0.1:8011 (env SLUICEGATE_WORKER_URL)",
    )
    group.addoption(
        "--worker-model",
        default=os.environ.get("SLUICEGATE_WORKER_MODEL"),
        help="a model name the worker serves (env SLUICEGATE_WORKER_MODEL)",
    )
    group.addoption(
        "--worker-tools",
        action="store_true",
        default=os.environ.get("SLUICEGATE_WORKER_TOOLS", "") not in ("", "0"),
        help="the worker can produce tool calls: run the TOOL rules (env SLUICEGATE_WORKER_TOOLS=1)",
    )
    group.addoption(
        "--worker-tool-choice",
        choices=("named", "required", "auto"),
        default="named",
        help="the tool_choice of the requests that must produce a tool call: one naming the function "
        '(default), "required", or "auto" with --worker-tool-prompt',
    )
    group.addoption(
        "--worker-tool-prompt",
        default=None,
        help="the user message of those requests, where the engine needs a cue to call the tool "
        "(default: a plain question about the weather)",
    )
    for option, env, what in (
        ("--worker-messages", "SLUICEGATE_WORKER_MESSAGES", "serves Anthropic Messages: run the MSG rules"),
        ("--worker-responses", "SLUICEGATE_WORKER_RESPONSES", "serves OpenAI Responses: run the RSP rules"),
        (
            "--worker-responses-store",
            "SLUICEGATE_WORKER_RESPONSES_STORE",
            "stores Responses (vLLM: VLLM_ENABLE_RESPONSES_API_STORE=1): run the RSP store rules",
        ),
        (
            "--worker-tokenize",
            "SLUICEGATE_WORKER_TOKENIZE",
            "serves vLLM's POST /tokenize: run the TOK rules",
        ),
    ):
        group.addoption(
            option,
            action="store_true",
            default=os.environ.get(env, "") not in ("", "0"),
            help=f"the worker {what} (env {env}=1)",
        )
    group.addoption(
        "--worker-allow",
        action="append",
        default=[],
        metavar="RULE",
        help="a rule id the worker is known to break (repeatable or comma-separated): reported as xfail",
    )
    group.addoption(
        "--worker-strict",
        action="store_true",
        default=False,
        help="an unmet SHOULD rule fails the run (by default it is an xfail)",
    )
    group.addoption(
        "--worker-timeout",
        type=float,
        default=60.0,
        help="seconds one request may take (default 60)",
    )
    group.addoption(
        "--worker-long-tokens",
        type=int,
        default=1000,
        help="max_tokens of the long generation (with ignore_eos) the disconnect rules abandon; capped "
        "by max_model_len - 100 where /v1/models reports it (default 1000)",
    )
    group.addoption(
        "--worker-burst",
        type=int,
        default=8,
        help="concurrent requests of the overload check (ERR-6)",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "rules(*ids): the contract rules a conformance test checks")
    allowed = {
        part.strip()
        for value in config.getoption("--worker-allow")
        for part in value.split(",")
        if part.strip()
    }
    rules.configure(frozenset(allowed), config.getoption("--worker-strict"))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--worker-url"):
        if not config.getoption("--worker-model"):
            raise pytest.UsageError("--worker-url needs --worker-model (or SLUICEGATE_WORKER_MODEL)")
        return
    skip = pytest.mark.skip(reason="no worker to check: pass --worker-url and --worker-model")
    for item in items:
        item.add_marker(skip)


# --- the per-rule summary at the end of a run -----------------------------------------------------

_RULE_MESSAGE = re.compile(r"\[([A-Z]+-\d+)\] (?:MUST|SHOULD|not decided)[^\n]*")


class _Verdicts:
    """What each rule came to in this run, from the messages of the rule helpers."""

    def __init__(self) -> None:
        self.broken: dict[str, list[str]] = defaultdict(list)
        self.deviations: dict[str, list[str]] = defaultdict(list)
        self.undecided: dict[str, list[str]] = defaultdict(list)
        self.other_failures: list[str] = []


_verdicts = _Verdicts()


def _report_text(report: pytest.TestReport) -> str:
    crash = getattr(report.longrepr, "reprcrash", None)
    if crash is not None:
        return str(crash.message)
    if isinstance(report.longrepr, tuple):  # a skip: (path, line, reason)
        return str(report.longrepr[2])
    return report.longreprtext


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    text = _report_text(report) if report.longrepr is not None else ""
    if hasattr(report, "wasxfail"):
        text = str(report.wasxfail)
    match = _RULE_MESSAGE.search(text)
    if report.failed:
        if match is None:
            _verdicts.other_failures.append(f"{report.nodeid}: {text.splitlines()[-1] if text else ''}")
        else:
            _verdicts.broken[match.group(1)].append(f"{report.nodeid}: {match.group(0)}")
    elif match is not None and hasattr(report, "wasxfail"):
        _verdicts.deviations[match.group(1)].append(f"{report.nodeid}: {match.group(0)}")
    elif match is not None and report.skipped:
        _verdicts.undecided[match.group(1)].append(f"{report.nodeid}: {match.group(0)}")


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not terminalreporter.config.getoption("--worker-url"):
        return
    write = terminalreporter.write_line
    terminalreporter.section("worker contract (workers/CONTRACT.md)")
    sections = (
        ("BROKEN", _verdicts.broken),
        ("XFAIL", _verdicts.deviations),
        ("UNDECIDED", _verdicts.undecided),
    )
    for label, verdicts in sections:
        for rule_id in sorted(verdicts, key=_rule_order):
            known = rules.RULES[rule_id]
            write(f"{label} {rule_id} ({known.level}) {known.summary}: {len(verdicts[rule_id])} test(s)")
            write(f"    e.g. {verdicts[rule_id][0]}")
    for failure in _verdicts.other_failures:
        write(f"ERROR (no rule) {failure}")
    broken = ", ".join(sorted(_verdicts.broken, key=_rule_order)) or "none"
    write(f"rules broken: {broken}")


def _rule_order(rule_id: str) -> int:
    return list(rules.RULES).index(rule_id)


@pytest.fixture(scope="session")
def worker(pytestconfig: pytest.Config) -> Worker:
    return Worker(
        pytestconfig.getoption("--worker-url").rstrip("/"),
        pytestconfig.getoption("--worker-model"),
        pytestconfig.getoption("--worker-timeout"),
    )


@pytest.fixture(scope="session")
def tools_supported(pytestconfig: pytest.Config) -> bool:
    supported: bool = pytestconfig.getoption("--worker-tools")
    return supported


@pytest.fixture(scope="session")
def tool_choice_mode(pytestconfig: pytest.Config) -> str:
    mode: str = pytestconfig.getoption("--worker-tool-choice")
    return mode


@pytest.fixture(scope="session")
def tool_prompt(pytestconfig: pytest.Config) -> str | None:
    prompt: str | None = pytestconfig.getoption("--worker-tool-prompt")
    return prompt


def capability(pytestconfig: pytest.Config, option: str, what: str) -> None:
    """Skip the calling test unless the run declared the worker able to do `what` with `option`."""
    if not pytestconfig.getoption(option):
        pytest.skip(f"the worker was not declared to serve {what} ({option})")


def chat_body(model: str, **extra: Any) -> JSONObject:
    return {
        "model": model,
        "messages": [{"role": "user", "content": "Say hello to the conformance suite, please."}],
        "max_tokens": SHORT_TOKENS,
        "temperature": 0,
        **extra,
    }


def completion_body(model: str, **extra: Any) -> JSONObject:
    return {
        "model": model,
        "prompt": "The conformance suite says hello to",
        "max_tokens": SHORT_TOKENS,
        "temperature": 0,
        **extra,
    }


def body_for(kind: str, model: str, **extra: Any) -> JSONObject:
    return chat_body(model, **extra) if kind == "chat" else completion_body(model, **extra)


def path_for(kind: str) -> str:
    return CHAT_PATH if kind == "chat" else COMPLETIONS_PATH


# The `stream_options` of each streamed exchange, by the name the tests use for it.
STREAM_OPTIONS: dict[str, JSONObject | None] = {
    "asked": {"include_usage": True},
    "absent": None,
    "declined": {"include_usage": False},
    "continuous": {"include_usage": True, "continuous_usage_stats": True},
    "continuous-off": {"include_usage": True, "continuous_usage_stats": False},
    "continuous-alone": {"include_usage": False, "continuous_usage_stats": True},
}


def stream_context(kind: str, usage: str) -> str:
    """How a failure names the stream it saw."""
    options = STREAM_OPTIONS[usage]
    shown = "no stream_options" if options is None else f"stream_options {json.dumps(options)}"
    return f"{kind} stream with {shown}"


class Exchanges:
    """Requests several rules look at, made once per run."""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        self._whole: dict[str, Reply] = {}
        self._streams: dict[tuple[str, str], Stream] = {}
        self._models: Reply | None = None

    def whole(self, kind: str) -> Reply:
        """The non-stream answer to the short request of `kind` ("chat" or "completions")."""
        if kind not in self._whole:
            self._whole[kind] = client.post(self.worker, path_for(kind), body_for(kind, self.worker.model))
        return self._whole[kind]

    def stream(self, kind: str, usage: str) -> Stream:
        """The same request streamed with the `stream_options` that `STREAM_OPTIONS[usage]` names."""
        key = (kind, usage)
        if key not in self._streams:
            extra: dict[str, Any] = {"stream": True}
            options = STREAM_OPTIONS[usage]
            if options is not None:
                extra["stream_options"] = options
            body = body_for(kind, self.worker.model, **extra)
            self._streams[key] = client.stream_request(self.worker, path_for(kind), body)
        return self._streams[key]

    def models(self) -> Reply:
        if self._models is None:
            self._models = client.get(self.worker, "/v1/models")
        return self._models

    def max_model_len(self) -> int | None:
        reply = self.models()
        parsed = reply.json_or_none() if reply.status == 200 else None
        data = parsed.get("data") if isinstance(parsed, dict) else None
        for entry in data if isinstance(data, list) else []:
            if isinstance(entry, dict) and entry.get("id") == self.worker.model:
                value = entry.get("max_model_len")
                return value if isinstance(value, int) and not isinstance(value, bool) else None
        return None


@pytest.fixture(scope="session")
def exchanges(worker: Worker) -> Exchanges:
    return Exchanges(worker)
