"""Which conversation a request belongs to, for `session_affinity` and `prefix_affinity`.

Coding agents say which session a request continues, each in its own way (measured against a
capturing server with Claude Code 2.1.332, Codex 0.169.0 and opencode 1.18.33):

    Claude Code   x-claude-code-session-id header; metadata.user_id, a JSON string holding the
                  same session id, which the Messages translation makes the chat `user`
    Codex         session-id header; prompt_cache_key in the Responses body (the same value)
    opencode      x-session-id and x-session-affinity headers (the same value)

The request's session is the first of these it carries, in this order (docs/routing.md):

    1. x-session-id               the gateway's own header, for any client
    2. x-session-affinity         opencode
    3. x-claude-code-session-id   Claude Code
    4. session-id                 Codex
    5. prompt_cache_key           a body's field (Codex's Responses; OpenAI SDK clients, chat too)
    6. the body's `user`          chat `user`, Messages `metadata.user_id`, Responses `user`

Explicit session headers come before body fields: a header names the conversation, while
`user` may name a person with many conversations. A client chooses every one of these values,
so a value only ever places requests among its own team's: the policies hash the team with it
(`RouteRequest.affinity_key`), and two teams sending the same value are placed independently.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

import orjson

SESSION_HEADERS = ("x-session-id", "x-session-affinity", "x-claude-code-session-id", "session-id")
PROMPT_CACHE_KEY = "prompt_cache_key"
USER = "user"
# Enough for any id an agent sends; a longer value is cut, which keeps it stable.
MAX_SESSION_CHARS = 256

_RANKS = {name.encode(): rank for rank, name in enumerate(SESSION_HEADERS)}
# The field and its string value, read from the body's bytes: parsing a large body a second time
# on every request would cost as much as the dialect's own parse. The dialect has validated the
# JSON, so a string ends at its first unescaped quote and this is one linear scan. It may find
# the name nested in an object (a `metadata` field): that places only the team's own requests.
_CACHE_KEY_NEEDLE = b'"' + PROMPT_CACHE_KEY.encode() + b'"'
_CACHE_KEY_RE = re.compile(rb'"' + PROMPT_CACHE_KEY.encode() + rb'"\s*:\s*("(?:[^"\\]|\\.)*")')


@dataclass(frozen=True, slots=True)
class Session:
    value: str
    source: str  # which header or field it came from: a fixed name, fit for a log line


def session_of(headers: Iterable[tuple[bytes, bytes]], body: bytes, user: str | None) -> Session | None:
    """The request's session by the precedence above; None when it names none.

    `headers`: the ASGI scope's raw headers (lower-case names). `body`: the request body the
    dialect has already parsed (only searched for `prompt_cache_key` when no header names a
    session, and never parsed again: only the field's value is decoded)."""
    best: tuple[int, str] | None = None
    for name, raw in headers:
        rank = _RANKS.get(name)
        if rank is None or (best is not None and best[0] <= rank):
            continue
        value = raw.decode("latin-1").strip()
        if value:
            best = (rank, value)
    if best is not None:
        return Session(best[1][:MAX_SESSION_CHARS], SESSION_HEADERS[best[0]])
    cache_key = _prompt_cache_key(body)
    if cache_key:
        return Session(cache_key[:MAX_SESSION_CHARS], PROMPT_CACHE_KEY)
    if user:
        return Session(user[:MAX_SESSION_CHARS], USER)
    return None


def _prompt_cache_key(body: bytes) -> str | None:
    start = body.find(_CACHE_KEY_NEEDLE)  # most bodies: not there, found at memchr speed
    found = None if start < 0 else _CACHE_KEY_RE.search(body, start)
    if found is None:
        return None
    try:
        value = orjson.loads(found.group(1))  # the string alone, its escapes decoded
    except orjson.JSONDecodeError:
        return None
    return value.strip() if isinstance(value, str) else None
