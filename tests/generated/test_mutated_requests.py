"""Mutated requests, byte by byte, for every route: what a schema-driven generator does not send.

Each example starts from a valid request for one route (real key, real admin token), then
Hypothesis (fixed seed, bounded examples, no shrinking) replaces one field with a hostile value
(numbers past 64 bits, infinities, lone surrogates, NULs, bidi overrides, deep nesting), corrupts
the bytes (invalid UTF-8, a BOM, truncation), and sends odd headers (content types, malformed
credentials, odd request ids). The gateway must answer every one, within the timeout, below 500,
and in the error envelope whenever it refuses.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

from tests.conftest import FAKE_MODEL
from tests.generated.conftest import Live
from tests.generated.wire import assert_answer, send

SEED = 20_611
MAX_EXAMPLES = 60  # per route
TIMEOUT_S = 10.0


@dataclass(frozen=True)
class Target:
    method: str
    path: str
    auth: str  # "key", "admin" or ""
    body: dict[str, Any] | None = None
    succeeds: bool = True  # sent unchanged with the right credentials, it is a 2xx every time


CHAT = {
    "model": FAKE_MODEL,
    "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
    "max_tokens": 4,
    "max_completion_tokens": 4,
    "n": 1,
    "stream": False,
    "stream_options": {"include_usage": True},
}
MESSAGES = {
    "model": FAKE_MODEL,
    "max_tokens": 4,
    "system": [{"type": "text", "text": "be brief"}],
    "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
    "stop_sequences": ["END"],
    "metadata": {"user_id": "u"},
    "stream": True,
}
RESPONSES = {
    "model": FAKE_MODEL,
    "instructions": "be brief",
    "input": [
        {"role": "user", "content": [{"type": "input_text", "text": "hi"}]},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "ok"},
    ],
    "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}}],
    "text": {"format": {"type": "json_schema", "name": "s", "schema": {"type": "object"}}},
    "max_output_tokens": 4,
    "stream": True,
}
TARGETS = [
    Target("POST", "/v1/chat/completions", "key", CHAT),
    Target(
        "POST",
        "/v1/completions",
        "key",
        {"model": "default", "prompt": ["a", "b"], "max_tokens": 4, "stream": True},
    ),
    Target("POST", "/v1/embeddings", "key", {"model": FAKE_MODEL, "input": "hi", "user": "u"}),
    Target("POST", "/v1/responses", "key", RESPONSES),
    Target("GET", "/v1/models", "key"),
    Target("POST", "/v1/messages", "key", MESSAGES),
    Target("POST", "/v1/messages/count_tokens", "key", {k: v for k, v in MESSAGES.items() if k != "stream"}),
    Target(
        "POST",
        "/admin/v1/teams",
        "admin",
        {"name": "t", "rpm": 5, "model_limits": {FAKE_MODEL: {"rpm": 1}}},
        False,
    ),
    Target("GET", "/admin/v1/teams", "admin"),
    Target("PATCH", "/admin/v1/teams/{team}", "admin", {"tpm": 10**12, "clear": ["rpm"]}),
    Target(
        "POST",
        "/admin/v1/keys",
        "admin",
        {"team": "{team}", "name": "n", "models": [FAKE_MODEL], "expires_at": "2999-01-01"},
    ),
    Target("GET", "/admin/v1/keys?team={team}", "admin"),
    Target("PATCH", "/admin/v1/keys/missing", "admin", {"rpm": 3, "tpm_counts": "input"}, False),
    Target("DELETE", "/admin/v1/keys/missing", "admin", None, False),
    Target("POST", "/admin/v1/keys/missing/rotate", "admin", {"grace_seconds": 60}, False),
    Target("GET", "/admin/v1/usage?team={team}&since=2024-01-01&format=csv", "admin"),
    Target("GET", "/admin/v1/models", "admin"),
    Target("GET", "/admin/v1/audit?team={team}&since=2024-01-01&limit=5&before=99999999999999-0", "admin"),
    Target("GET", "/metrics", ""),
    Target("GET", "/healthz", ""),
    Target("GET", "/readyz", ""),
    Target("GET", "/openapi.json", ""),
]

# JSON text spliced in raw, so values Python's json module would refuse to write get sent too.
HOSTILE_VALUES = [
    "18446744073709551615",  # 2**64 - 1: the largest integer orjson reads as one
    "18446744073709551616",  # 2**64: read as a float
    "9223372036854775807",
    "-9223372036854775809",
    "1" + "0" * 400,
    "1e400",  # infinity as a double
    "-0.0",
    "1e-400",
    "NaN",
    "Infinity",
    '"\\ud800"',  # a lone surrogate
    '"\\u0000"',
    '"a\\u202eb\\u2066c"',  # bidi overrides
    '"\\n\\r\\t"',
    json.dumps("x" * 20_000),
    json.dumps("\U0001f600" * 500),
    "[" * 300 + "]" * 300,  # deeper than orjson writes (254)
    "[" * 2000 + "]" * 2000,  # deeper than orjson reads (1024)
    "{}",
    "[]",
    "null",
    "true",
]


def _set(body: Any, path: list[str | int], raw: str) -> str:
    """The body as JSON text with the value at `path` replaced by the raw JSON `raw`."""
    marker = "__HOSTILE__"
    target = json.loads(json.dumps(body))
    node = target
    for step in path[:-1]:
        node = node[step]
    node[path[-1]] = marker
    return json.dumps(target).replace(json.dumps(marker), raw)


def _paths(value: Any, prefix: list[str | int]) -> list[list[str | int]]:
    out: list[list[str | int]] = []
    if isinstance(value, dict):
        for k, v in value.items():
            out.append([*prefix, k])
            out.extend(_paths(v, [*prefix, k]))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out.append([*prefix, i])
            out.extend(_paths(v, [*prefix, i]))
    return out


@st.composite
def bodies(draw: st.DrawFn, body: dict[str, Any] | None) -> bytes | None:
    base = json.dumps(body) if body is not None else None
    kind = draw(st.sampled_from(["valid", "field", "new_field", "bytes", "none"]))
    if kind == "valid" or (body is None and kind in ("field", "new_field")):
        return base.encode() if base is not None else None
    if kind == "none":
        return None
    if kind == "field" and body is not None:
        path = draw(st.sampled_from(_paths(body, [])))
        return _set(body, path, draw(st.sampled_from(HOSTILE_VALUES))).encode()
    if kind == "new_field" and body is not None:
        name = draw(st.text(max_size=20))
        return _set({**body, name: 0}, [name], draw(st.sampled_from(HOSTILE_VALUES))).encode()
    raw = (base or "{}").encode()
    corrupt = draw(st.sampled_from(["truncate", "utf8", "bom", "utf16", "trailing", "random"]))
    if corrupt == "truncate":
        return raw[: draw(st.integers(0, max(len(raw) - 1, 0)))]
    if corrupt == "utf8":
        at = draw(st.integers(0, len(raw)))
        return raw[:at] + draw(st.sampled_from([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\x00"])) + raw[at:]
    if corrupt == "bom":
        return b"\xef\xbb\xbf" + raw
    if corrupt == "utf16":
        return raw.decode().encode("utf-16")
    if corrupt == "trailing":
        return raw + b"}{,"
    return draw(st.binary(max_size=200))


def headers(auth: str) -> st.SearchStrategy[list[tuple[str, bytes]]]:
    # Mostly the right credentials, so most examples get past authentication to the body.
    authorization = st.sampled_from(
        [
            *[b"Bearer {secret}"] * 12,
            b"bearer {secret}",
            b"Bearer   {secret}  ",
            b"",
            b"Bearer",
            b"Bearer ",
            b"Basic {secret}",
            b"Bearer {secret}x",
            b"Bearer " + b"A" * 8000,
            b"Bearer \xff\xfe",
            None,
        ]
    )
    content_type = st.sampled_from(
        [
            b"application/json",
            b"text/plain",
            b"application/json; charset=latin-1",
            b"multipart/form-data; boundary=x",
            b"application/json\xe9",
            b"",
            None,
        ]
    )
    # Any byte a header value may hold (RFC 9110 field-vchar, SP, obs-text): a control byte or
    # DEL is malformed HTTP, refused by uvicorn's parser with its own plain-text 400 before the
    # gateway sees the request.
    legal = st.characters(codec="latin-1", min_codepoint=0x20, exclude_characters="\x7f")
    request_id = st.none() | st.text(alphabet=legal, max_size=300).map(lambda s: s.encode("latin-1"))

    def build(a: bytes | None, c: bytes | None, r: bytes | None, twice: bool) -> list[tuple[str, bytes]]:
        out: list[tuple[str, bytes]] = []
        if a is not None:
            out.append(("authorization", a))
            if twice:
                out.append(("authorization", b"Bearer wrong"))
        if c is not None:
            out.append(("content-type", c))
        if r is not None:
            out.append(("x-request-id", r))
        return out

    if not auth:
        authorization = st.just(None) | authorization
    return st.builds(build, authorization, content_type, request_id, st.booleans())


@pytest.mark.parametrize("target", TARGETS, ids=lambda t: f"{t.method} {t.path.split('?')[0]}")
def test_mutated_request(target: Target, live: Live) -> None:
    secret = {"key": live.api_key, "admin": live.admin_token, "": live.api_key}[target.auth].encode()
    path = target.path.replace("{team}", live.team)
    body = json.loads(json.dumps(target.body).replace("{team}", live.team)) if target.body else None
    valid = json.dumps(body).encode() if body is not None else None

    @seed(SEED)
    @settings(
        max_examples=MAX_EXAMPLES,
        database=None,
        deadline=None,
        phases=[Phase.explicit, Phase.generate],  # no shrinking: a failure is reported as found
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(raw=bodies(body), head=headers(target.auth))
    def run(raw: bytes | None, head: list[tuple[str, bytes]]) -> None:
        head = [(n, v.replace(b"{secret}", secret)) for n, v in head]
        head.append(("x-forwarded-for", live.new_client().encode()))
        status, _, answer = send(live.url, target.method, path, raw, head, TIMEOUT_S)
        what = f"{target.method} {path} body={(raw or b'')[:120]!r} headers={head!r}"
        assert_answer(status, answer, what, path=path, method=target.method)
        authorized = not target.auth or dict(head).get("authorization") == b"Bearer " + secret
        if target.succeeds and authorized and raw == valid:
            assert 200 <= status < 300, f"{what}: {status} {answer[:300]!r}"

    run()
