"""The admin audit log: every change the admin API makes, one entry each, in one bounded Redis stream.

sg:audit  STREAM  newest last, trimmed to about SLUICEGATE_AUDIT_MAX_ENTRIES (XADD MAXLEN ~, so
                  trimming costs nothing per write). An entry's id is Redis's own clock in
                  milliseconds: one clock for every replica, so entries sort the same everywhere.

An entry's fields:
  action   team.created, team.updated, team.deleted, key.created, key.updated, key.rotated,
           key.revoked, role.bound, role.unbound; scim.user.created, scim.user.replaced,
           scim.user.patched, scim.user.deleted and the same for scim.group (gateway/scim/)
  team     the team's name; empty for a change that is no team's (a platform role's binding)
  key_id   the key's id; empty for a team's own change
  changes  JSON {field: [old, new]}: limits (`model_limits.<model>` per model), budgets, weight,
           a key's name, models and expiry, a rotation's grace and a revocation's time
  actor    JSON: who asked (gateway/identity/principal.py): {"kind": "person", "sub", "email",
           "name", "issuer"}, {"kind": "service", "client_id", "issuer"}, {"kind": "token"} (the
           break-glass admin token), {"kind": "scim"} (provisioning) or {"kind": "system"};
           entries written before actors were recorded show null
  peer     from where: the TCP peer, or behind a trusted proxy (SLUICEGATE_TRUSTED_PROXIES) the
           nearest X-Forwarded-For hop that is not one (gateway/admin/throttle.py)

Never a key's secret or its hash, never the admin token: the key store hands over field values of
the public record only.

Written as a step of the change (gateway/keys/steps.py): a change's keys and this stream are in
different Redis Cluster hash slots (a key's record is found by its secret's hash alone), so no
transaction holds both, on a cluster or (one code path) on one Redis. The key store orders the
entry against its change: a key's creation or rotation writes the entry before the step that
makes the new secret usable, so no usable secret lacks its entry; a revocation marks the key
first (refusing it matters more than recording it) and a team's change lands first. A write
whose entry fails is a 503 `redis_unavailable` to the admin, so a missed entry is never silent:
the admin knows the outcome is unknown, and the change, if it landed, is in the listings.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import math
import re
from collections.abc import Mapping
from typing import Any, Protocol

import orjson

from gateway.errors import ErrorCode, GatewayError
from gateway.redis.keys import EncodableT

DEFAULT_PAGE = 100
MAX_PAGE = 1000
# With a team filter most entries may belong to other teams: read this many per round trip.
_SCAN_PAGE = 1000
# A stream id as the API shows it (and takes back in `before`): digits either side of a dash,
# few enough that both halves fit Redis's unsigned 64-bit parts.
STREAM_ID_RE = re.compile(r"([0-9]{1,19})-([0-9]{1,19})")
_LIMIT_RE = re.compile(r"[0-9]{1,4}")
_MAX_SEQ = 2**64 - 1
# Latest `since` accepted: the last second of year 9999, as far as ISO dates go.
_LATEST_S = 253_402_300_799
_MAX_PEER_CHARS = 100


def _flat(values: Mapping[str, Any]) -> dict[str, Any]:
    """Per-model limits as one field per model, so a change to one model's limits names it."""
    out = {name: value for name, value in values.items() if name != "model_limits"}
    for model, limits in (values.get("model_limits") or {}).items():
        out[f"model_limits.{model}"] = limits
    return out


def changes(before: Mapping[str, Any], after: Mapping[str, Any]) -> dict[str, list[Any]]:
    """{field: [old, new]} for every field whose value differs (a missing field is null)."""
    old, new = _flat(before), _flat(after)
    return {
        name: [old.get(name), new.get(name)]
        for name in sorted({*old, *new})
        if old.get(name) != new.get(name)
    }


class RequestJournal:
    """The audit log as one admin request writes to it: what gateway.keys.store.Journal asks for."""

    def __init__(self, log: AuditLog, actor: Mapping[str, Any], peer: str) -> None:
        self._log = log
        self.actor = actor
        self._peer = peer

    async def write(
        self,
        action: str,
        *,
        team: str,
        key_id: str | None = None,
        before: Mapping[str, Any],
        after: Mapping[str, Any],
    ) -> None:
        await self._log.append(
            action, team=team, key_id=key_id, diff=changes(before, after), actor=self.actor, peer=self._peer
        )


class AuditEntries(Protocol):
    """The stream (gateway/admin/audit_store.py); each raises StoreUnavailable."""

    async def append(self, fields: dict[str, EncodableT]) -> None: ...

    async def newest(self, top: str, bottom: str, count: int) -> list[tuple[bytes, dict[bytes, bytes]]]: ...


class AuditLog:
    def __init__(self, store: AuditEntries) -> None:
        self._store = store

    def by(self, actor: Mapping[str, Any], peer: str) -> RequestJournal:
        # An address is short; anything longer is not one (a trusted chain's odd hop): cut it.
        return RequestJournal(self, actor, peer[:_MAX_PEER_CHARS])

    async def append(
        self,
        action: str,
        *,
        team: str,
        key_id: str | None,
        diff: Mapping[str, list[Any]],
        actor: Mapping[str, Any],
        peer: str,
    ) -> None:
        """Appends the entry; its id `*` is Redis's clock."""
        fields: dict[str, EncodableT] = {
            "action": action,
            "team": team,
            "key_id": key_id or "",
            "changes": orjson.dumps(diff),
            "actor": orjson.dumps(actor),
            "peer": peer,
        }
        await self._store.append(fields)

    async def entries(
        self, *, teams: frozenset[str] | None, since_ms: int | None, before: str | None, limit: int
    ) -> tuple[list[dict[str, Any]], bool]:
        """Up to `limit` entries of `teams` (None: every entry), newest first, and whether older
        ones (that match) remain."""
        top = "+" if before is None else _previous(before)
        bottom = "-" if since_ms is None else f"{since_ms}-0"
        wanted = frozenset(t.encode() for t in teams) if teams is not None else None
        page_size = _SCAN_PAGE if wanted is not None else limit + 1
        out: list[dict[str, Any]] = []
        while top is not None:
            page = await self._store.newest(top, bottom, page_size)
            for entry_id, fields in page:
                if wanted is None or fields.get(b"team") in wanted:
                    if len(out) == limit:
                        return out, True
                    out.append(_entry(entry_id, fields))
            if len(page) < page_size:
                break
            top = _previous(page[-1][0].decode())
        return out, False


def _previous(entry_id: str) -> str | None:
    """The greatest id below `entry_id` (XREVRANGE's exclusive `(` cannot go below 0-0); None when
    there is none."""
    ms_text, seq_text = entry_id.split("-")
    ms, seq = int(ms_text), int(seq_text)
    if seq > 0:
        return f"{ms}-{seq - 1}"
    if ms > 0:
        return f"{ms - 1}-{_MAX_SEQ}"
    return None


def _entry(entry_id: bytes, fields: Mapping[bytes, bytes]) -> dict[str, Any]:
    text_id = entry_id.decode()
    ms = int(text_id.split("-")[0])
    when = dt.datetime.fromtimestamp(ms / 1000, dt.UTC)
    diff: Any = {}
    with contextlib.suppress(orjson.JSONDecodeError):
        diff = orjson.loads(fields.get(b"changes", b"{}"))
    actor: Any = None
    with contextlib.suppress(orjson.JSONDecodeError):
        actor = orjson.loads(fields[b"actor"]) if b"actor" in fields else None

    def text(name: bytes) -> str:
        return fields.get(name, b"").decode("utf-8", "replace")

    return {
        "id": text_id,
        "time": when.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        "action": text(b"action"),
        "team": text(b"team"),
        "key_id": text(b"key_id") or None,
        "changes": diff if isinstance(diff, dict) else {},
        "actor": actor if isinstance(actor, dict) else None,
        "peer": text(b"peer"),
    }


def parse_limit(value: str | None) -> int:
    if value is None:
        return DEFAULT_PAGE
    if not _LIMIT_RE.fullmatch(value) or not 1 <= int(value) <= MAX_PAGE:
        raise GatewayError(
            ErrorCode.INVALID_REQUEST,
            f"'limit' must be a whole number from 1 to {MAX_PAGE}.",
            param="limit",
        )
    return int(value)


def parse_since(value: str | None) -> int | None:
    """`since`: Unix seconds, or an ISO 8601 date or time (UTC unless it says otherwise), as
    milliseconds (a stream id's clock); empty is no bound."""
    if value is None or value == "":
        return None
    when: float | None = None
    with contextlib.suppress(ValueError, OverflowError):
        when = float(value)
    if when is None:
        with contextlib.suppress(ValueError, OverflowError):
            parsed = dt.datetime.fromisoformat(value)
            when = (parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)).timestamp()
    if when is None or not math.isfinite(when) or not 0 <= when <= _LATEST_S:
        raise GatewayError(
            ErrorCode.INVALID_REQUEST,
            "'since' must be Unix seconds or an ISO 8601 date/time such as 2026-01-31 or "
            "2026-01-31T12:00:00Z.",
            param="since",
        )
    return math.ceil(when * 1000)


def parse_before(value: str | None) -> str | None:
    """`before`: an entry's id from an earlier page; the listing goes on below it."""
    if value is None or value == "":
        return None
    if not STREAM_ID_RE.fullmatch(value):
        raise GatewayError(
            ErrorCode.INVALID_REQUEST,
            "'before' must be an entry id from an earlier page, such as 1767225600000-0.",
            param="before",
        )
    return value
