"""The usage a worker answer reported, read from its body in any of the three dialects (a whole
answer or a stream), so a test can compare it with what the gateway metered."""

from __future__ import annotations

import json
from typing import Any


def _events(body: bytes) -> list[Any]:
    events = []
    for line in body.decode(errors="replace").splitlines():
        if line.startswith("data: ") and line[6:].strip() != "[DONE]":
            try:
                events.append(json.loads(line[6:]))
            except ValueError:
                continue
    return events


def reported_usage(path: str, body: bytes) -> tuple[int, int]:
    """(prompt, completion) tokens of one answer to `path`; (0, 0) when it reported none."""
    stripped = body.lstrip()
    whole = [json.loads(stripped)] if stripped.startswith(b"{") else None
    events = whole if whole is not None else _events(body)
    prompt = completion = 0
    for event in events:
        if not isinstance(event, dict):
            continue
        if path.endswith("/messages"):
            usage = event.get("usage") or (event.get("message") or {}).get("usage")
            if isinstance(usage, dict):
                # message_start carries the input, message_delta the final output (and input again).
                prompt = usage.get("input_tokens", prompt) or prompt
                completion = usage.get("output_tokens", completion)
        elif path.endswith("/responses"):
            usage = event.get("usage") if whole is not None else (event.get("response") or {}).get("usage")
            if isinstance(usage, dict):
                prompt, completion = usage["input_tokens"], usage["output_tokens"]
        else:
            usage = event.get("usage")
            if isinstance(usage, dict):
                prompt, completion = usage["prompt_tokens"], usage["completion_tokens"]
    return prompt, completion
