"""Checks more than one test file makes: error envelopes, usage objects, the load gauges."""

from __future__ import annotations

from typing import Any

from workers.conformance import client
from workers.conformance.client import NamedStream, Reply, Worker
from workers.conformance.rules import rule

RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"
KV_CACHE = "vllm:kv_cache_usage_perc"
FINISH_REASONS = ("stop", "length", "tool_calls")


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def error_envelope(reply: Reply, context: str, rule_id: str = "ERR-1") -> dict[str, Any]:
    """ERR-1 (or `rule_id`): a non-2xx answer is JSON `{"error": {message, type, param, code}}`."""
    content_type = reply.headers.get("content-type", "")
    rule(
        rule_id,
        content_type.split(";")[0].strip() == "application/json",
        f"{context}: expected content-type application/json, saw {content_type!r} ({reply.brief()})",
    )
    body = reply.json_or_none()
    error = body.get("error") if isinstance(body, dict) else None
    rule(
        rule_id,
        isinstance(error, dict),
        f'{context}: expected a body {{"error": {{...}}}} with an object inside, saw {reply.brief()}',
    )
    assert isinstance(error, dict)
    problems = []
    if not isinstance(error.get("message"), str) or not error["message"]:
        problems.append("`message` must be a non-empty string")
    if not isinstance(error.get("type"), str):
        problems.append("`type` must be a string")
    if "param" not in error or not (error["param"] is None or isinstance(error["param"], str)):
        problems.append("`param` must be present, a string or null")
    if "code" not in error or not (error["code"] is None or isinstance(error["code"], str | int)):
        problems.append("`code` must be present, a string, an integer or null")
    rule(rule_id, not problems, f"{context}: {'; '.join(problems)} in {reply.brief()}")
    return error


def usage_object(rule_id: str, usage: Any, context: str) -> dict[str, int]:
    """A complete usage object: integer counts, at least one prompt token, total = sum."""
    rule(rule_id, isinstance(usage, dict), f"{context}: expected a `usage` object, saw {usage!r}")
    assert isinstance(usage, dict)
    names = ("prompt_tokens", "completion_tokens", "total_tokens")
    bad = [name for name in names if not is_int(usage.get(name)) or usage[name] < 0]
    rule(rule_id, not bad, f"{context}: expected non-negative integers {bad}, saw usage {usage!r}")
    rule(rule_id, usage["prompt_tokens"] >= 1, f"{context}: expected prompt_tokens >= 1, saw {usage!r}")
    total = usage["prompt_tokens"] + usage["completion_tokens"]
    rule(
        rule_id,
        usage["total_tokens"] == total,
        f"{context}: expected total_tokens = prompt + completion = {total}, saw {usage!r}",
    )
    return {name: usage[name] for name in names}


def load(worker: Worker) -> tuple[float, float]:
    """(running, waiting) for the worker's model; a missing gauge reads as 0 (MET rules catch it)."""
    metrics = client.read_metrics(worker)
    running = metrics.value(RUNNING, worker.model) or 0.0
    waiting = metrics.value(WAITING, worker.model) or 0.0
    return running, waiting


def settled_load(worker: Worker, timeout_s: float = 10.0) -> float:
    """running + waiting once the worker has finished earlier work (0 on an idle worker)."""
    met, _ = client.wait_until(lambda: sum(load(worker)) == 0, timeout_s, 0.05)
    return 0.0 if met else sum(load(worker))


def anthropic_or_openai_error(reply: Reply, context: str, rule_id: str) -> None:
    """A Messages error body: `{"type": "error", "error": {"type", "message"}}` (what vLLM's
    handler answers), or the OpenAI envelope (what its request validation answers)."""
    body = reply.json_or_none()
    if isinstance(body, dict) and body.get("type") == "error":
        content_type = reply.headers.get("content-type", "")
        rule(
            rule_id,
            content_type.split(";")[0].strip() == "application/json",
            f"{context}: expected content-type application/json, saw {content_type!r} ({reply.brief()})",
        )
        error = body.get("error")
        rule(
            rule_id,
            isinstance(error, dict)
            and isinstance(error.get("type"), str)
            and isinstance(error.get("message"), str)
            and error["message"],
            f'{context}: expected {{"type": "error", "error": {{"type": str, "message": str}}}}, '
            f"saw {reply.brief()}",
        )
        return
    error_envelope(reply, context, rule_id)


def named_event_stream(rule_id: str, stream: NamedStream, where: str) -> None:
    """The framing Messages and Responses streams share: 200 `text/event-stream` without a
    content-length, a body that ends properly, and only `event: <type>` + `data: <json>` events."""
    reply = stream.reply
    rule(rule_id, reply.status == 200, f"{where}: expected 200, saw {reply.brief()}")
    content_type = reply.headers.get("content-type", "")
    rule(
        rule_id,
        content_type.split(";")[0].strip() == "text/event-stream" and "content-length" not in reply.headers,
        f"{where}: expected text/event-stream without content-length, saw {content_type!r}, "
        f"content-length {reply.headers.get('content-length')!r}",
    )
    rule(rule_id, reply.complete, f"{where}: expected the body to end properly, saw: {reply.problem}")
    rule(
        rule_id,
        not stream.framing_problems and not stream.trailing,
        f"{where}: expected only 'event: <type>\\ndata: <json>\\n\\n' events ending with a blank line, "
        f"saw: {'; '.join(stream.framing_problems)} trailing {stream.trailing[:80]!r}",
    )
