"""Every Redis key name the gateway uses, in one place.

Keys a Lua script touches together carry the same hash tag, the team's (`{t:<team>}`), so each
script runs on one Redis Cluster slot. Team names are restricted (see keystore.TEAM_NAME_RE) and
can never contain a brace.
"""

from __future__ import annotations

from typing import TypeAlias

# A value a command takes (redis-py's EncodableT, named here so no caller imports redis-py).
EncodableT: TypeAlias = bytes | bytearray | memoryview | str | int | float

PREFIX = "sg"
TEAMS = f"{PREFIX}:teams"
KEY_INVALIDATIONS = f"{PREFIX}:keys:invalidate"  # pub/sub channel: secret hashes to drop from caches
# The cache salt secret, when SLUICEGATE_CACHE_SALT_SECRET is not set (gateway/proxy/cache_salt.py).
CACHE_SALT_SECRET = f"{PREFIX}:cache-salt-secret"


def team_tag(team: str) -> str:
    # The builders below write `{t:<team>}` out rather than call this: they run several times
    # per request (tests/integration/test_gcra.py checks that every one carries this tag).
    return f"{{t:{team}}}"


def team(team: str) -> str:
    return f"{PREFIX}:team:{team}"


def team_keys(team: str) -> str:
    return f"{PREFIX}:team:{team}:keys"


def key_by_hash(secret_hash: str) -> str:
    return f"{PREFIX}:key:{secret_hash}"


def key_hash_by_id(key_id: str) -> str:
    return f"{PREFIX}:keyid:{key_id}"


def retired_key_hashes(key_id: str) -> str:
    return f"{PREFIX}:keyid:{key_id}:retired"


def rate_limit(team: str, scope: str) -> str:
    return rate_limits(team) + scope


def rate_limits(team: str) -> str:
    """The start of every rate-limit key of `team`, for a caller that names several at once."""
    return f"{PREFIX}:{{t:{team}}}:rl:"


def request_marker(team: str, request_id: str) -> str:
    return f"{PREFIX}:{{t:{team}}}:req:{request_id}"


def admission_marker(team: str, request_id: str) -> str:
    """Exists while an admission's charges are unsettled: what lets a charge whose reply was lost
    be given back, and only if it was really made."""
    return f"{PREFIX}:{{t:{team}}}:adm:{request_id}"


def usage_day(team: str, day: str) -> str:
    return f"{PREFIX}:{{t:{team}}}:usage:{day}"


def usage_days(team: str) -> str:
    return f"{PREFIX}:{{t:{team}}}:usage-days"


def key_last_used(team: str) -> str:
    """HASH key id -> Unix seconds of its last finished request, written by settle.lua in the
    write that meters the request (so tracking it costs no round trip of its own)."""
    return f"{PREFIX}:{{t:{team}}}:last-used"


def as_text(value: bytes | str) -> str:
    """Replies come back as bytes (the client does not decode, to keep hot paths cheap)."""
    return value.decode() if isinstance(value, bytes) else value


def stored_response(response_id: str) -> str:
    """Which endpoint holds a response a worker stored, and whose it is. Response ids are checked
    (gateway.proxy.translation.native.RESPONSE_ID_RE) and can never contain a brace."""
    return f"{PREFIX}:resp:{{{response_id}}}"


def audit_log() -> str:
    """The admin audit log (gateway/admin/audit.py): one stream, written by XADD as a step of each
    key-store change and read by XREVRANGE; no script touches it, so it needs no hash tag."""
    return f"{PREFIX}:audit"


def console_flash(flash_id: str) -> str:
    """A key's new secret, waiting for the one console page that shows it (read with GETDEL)."""
    return f"{PREFIX}:console:flash:{flash_id}"


def console_signed_out(session_id: str) -> str:
    """A console session signed out before its cookie expires: refused until then."""
    return f"{PREFIX}:console:signed-out:{session_id}"


def fair_share(pool: str) -> tuple[str, str, str]:
    """One pool's fair-share counters (gateway/redis/lua/vtc.lua): the counters, the active teams
    and the floor. Whatever the pool's name holds, the three differ only after it, so they always
    share one hash tag, the `{vtc:<pool>` part."""
    base = f"{PREFIX}:{{vtc:{pool}}}"
    return f"{base}:counters", f"{base}:active", f"{base}:floor"


def prefix_log() -> str:
    """The stream through which replicas share their prefix-routing index
    (gateway/routing/prefix_share.py): one key, its own hash tag."""
    return f"{PREFIX}:{{prefix}}:log"


def role_bindings() -> str:
    """HASH binding id -> the binding as JSON (gateway/identity/bindings.py): read whole for each
    admin call by a person, so a removed binding is gone on every replica at once. No script
    touches it, so it needs no hash tag."""
    return f"{PREFIX}:role-bindings"


def console_session(session_id: str) -> str:
    """A console sign-in (gateway/console/session.py): who signed in, until when; its TTL is the
    session's. Deleted at sign-out, so every replica refuses the cookie at once."""
    return f"{PREFIX}:console:session:{session_id}"


def console_oidc_flow(state: str) -> str:
    """One IdP sign-in under way (gateway/console/sso.py): its PKCE verifier, nonce and where to
    return, taken once by the callback (GETDEL)."""
    return f"{PREFIX}:console:oidc-flow:{state}"


# The console's session secret, when SLUICEGATE_SESSION_SECRET is not set (gateway/console/session.py).
CONSOLE_SESSION_SECRET = f"{PREFIX}:console:session-secret"


def scim(*parts: str) -> str:
    """The SCIM directory (gateway/scim/store.py names each key it uses): users, groups, their
    indexes, memberships and the tombstones of deleted users. Every key shares the `{scim}` hash
    tag, so each of the directory's scripts (scim_*.lua) runs on one Redis Cluster slot: ten
    thousand users and a thousand groups fit one node easily. A part may hold any text (a
    userName, a group's id); the tag comes first, so nothing in a part can move the slot."""
    return ":".join((f"{PREFIX}:{{scim}}", *parts))


# The Files and Batch API (gateway/batch/): a team's files and batches under its hash tag, so the
# batch scripts (gateway/redis/lua/batch_*.lua) touch a batch's lines, the team's running lines
# and queued-line count in one slot. Ids are the gateway's own (`file-<hex>`, `batch_<hex>`).
BATCHES_ACTIVE = f"{PREFIX}:batches:active"  # SET "<team>/<batch id>": what the engines look at


def files_index(team: str) -> str:
    return f"{PREFIX}:{{t:{team}}}:files"


def file_record(team: str, file_id: str) -> str:
    return f"{PREFIX}:{{t:{team}}}:file:{file_id}"


def batches_index(team: str) -> str:
    return f"{PREFIX}:{{t:{team}}}:batches"


def batch_record(team: str, batch_id: str) -> str:
    return f"{PREFIX}:{{t:{team}}}:batch:{batch_id}"


def batch_lines(team: str, batch_id: str) -> tuple[str, str, str, str, str]:
    """A batch's lines: pending (LIST of line numbers), leases (ZSET line -> lease end, ms),
    owners (HASH line -> the claim's token), results (HASH line -> its output or error line),
    tries (HASH line -> worker failures)."""
    base = f"{PREFIX}:{{t:{team}}}:batch:{batch_id}"
    return f"{base}:pending", f"{base}:leases", f"{base}:owners", f"{base}:results", f"{base}:tries"


def batch_running(team: str) -> str:
    """ZSET `<batch id>:<line>` -> lease end (ms): the team's lines running now, on any replica."""
    return f"{PREFIX}:{{t:{team}}}:batch-running"


def batch_queued(team: str) -> str:
    """The team's batch lines not yet done, all batches together (bounded by max_batch_lines)."""
    return f"{PREFIX}:{{t:{team}}}:batch-queued"


def batch_finalizer(team: str, batch_id: str) -> str:
    """Held by the replica writing a batch's output files (SET NX with a TTL)."""
    return f"{PREFIX}:{{t:{team}}}:batch:{batch_id}:finalizer"
