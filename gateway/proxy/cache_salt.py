"""vLLM's `cache_salt`: which requests may share cached prompt blocks in an engine.

An engine reuses a cached prefix only for a request with the same salt (vLLM mixes it into the
hash of the first block, and block hashes chain). A hit is visible to the caller as a fast first
token, so a shared cache tells one team whether a guessed prefix (another team's system prompt, a
document, a name) was sent lately. The gateway, the trusted proxy vLLM's docs ask for, therefore
sets the salt of every generation request itself:

    salt = "sg1" + base64url(HMAC-SHA256(secret, scope))          46 URL-safe characters

    scope, by the model's `cache_isolation`:
      team (default)  team id [+ the client's own salt]            a team shares with itself
      key             team id + key id [+ the client's own salt]    each key with itself
      shared          the client's own salt, or no salt at all      everyone (public prompts)

The team id is minted when the team is made (gateway.keys.store), never its name: a team deleted
and re-created under its name starts cold. A client's own `cache_salt` can only narrow its scope
(a team isolating its users from each other): it is mixed in, never sent as is, so no value a
client sends reaches another team's blocks, not even the exact salt the gateway derives for it.

The secret is SLUICEGATE_CACHE_SALT_SECRET, the same on every replica. Without it the first
replica to need one mints one into Redis (SET NX) and every replica reads that: zero
configuration, one salt per team on every replica and across restarts, but kept where whoever
reads Redis (who also sees team ids) can derive the salts; setting it keeps it out. A new secret
costs one cold cache, nothing else.
"""

from __future__ import annotations

import base64
import enum
import hashlib
import hmac
import re
from dataclasses import dataclass, field
from typing import Any

from gateway.errors import ErrorCode, GatewayError
from gateway.redis.shared_secret import SharedSecret

# What vLLM accepts now and after its tightening (vllm PR 57609: at most 128 characters, none of
# `@ / \` or NUL): RFC 3986's unreserved characters.
CLIENT_SALT_RE = re.compile(r"[A-Za-z0-9._~-]{1,128}")
_VERSION = b"sg1"


class Isolation(enum.StrEnum):
    """A model's `cache_isolation` (gateway.model_table keeps it as its string)."""

    TEAM = "team"
    KEY = "key"
    SHARED = "shared"


def client_salt(payload: dict[str, Any]) -> str | None:
    """The client's own `cache_salt`, checked (a 400 naming it otherwise); None when not given."""
    salt = payload.get("cache_salt")
    if salt is None:
        return None
    if not isinstance(salt, str) or not CLIENT_SALT_RE.fullmatch(salt):
        # Not echoed: it may be something the client should not have pasted.
        raise GatewayError(
            ErrorCode.INVALID_REQUEST,
            "'cache_salt' must be a string of 1 to 128 URL-safe characters (letters, digits, "
            "'-', '_', '.', '~').",
            param="cache_salt",
        )
    return salt


def derive(secret: bytes, isolation: str, *, team_id: str, key_id: str, client: str | None) -> str | None:
    """The salt a worker gets; None (no salt: the engine's shared cache) only for a `shared`
    model and a client that sent none. Each part is length-prefixed, so no choice of client salt
    can make one scope's input equal another's."""
    if isolation == Isolation.SHARED:
        if client is None:
            return None
        parts = [b"shared", client.encode()]
    else:
        parts = [b"team", team_id.encode()]
        if isolation == Isolation.KEY:
            parts += [b"key", key_id.encode()]
        if client is not None:
            parts += [b"client", client.encode()]
    scope = b"".join(len(p).to_bytes(4, "big") + p for p in parts)
    digest = hmac.new(secret, scope, hashlib.sha256).digest()
    return (_VERSION + base64.urlsafe_b64encode(digest).rstrip(b"=")).decode()


def salted(raw: bytes, salt: str) -> bytes:
    """A JSON object's bytes with `cache_salt` added last, without re-encoding the rest. Only for
    a body that has no `cache_salt` of its own; `salt` is URL-safe, so it needs no escaping."""
    body = raw.rstrip()
    return body[:-1] + b',"cache_salt":"' + salt.encode() + b'"}'


# Salts kept per CacheSalts (one secret): past this many the map starts again, so client salts
# made up per request cannot grow it without bound.
_MAX_DERIVED = 10_000


@dataclass(frozen=True, slots=True)
class SaltScope:
    """One request's side of its salt: each pool it may go to salts by its model's isolation.
    `derived`: the salts already worked out with this secret (CacheSalts'), so a request of a team
    seen before costs a dict look-up rather than an HMAC."""

    secret: bytes
    team_id: str
    key_id: str
    client: str | None
    derived: dict[tuple[str, str, str, str | None], str | None] | None = field(default=None, compare=False)

    def for_model(self, isolation: str) -> str | None:
        derived = self.derived
        entry = (isolation, self.team_id, self.key_id, self.client)
        if derived is not None and entry in derived:
            return derived[entry]
        salt = derive(self.secret, isolation, team_id=self.team_id, key_id=self.key_id, client=self.client)
        if derived is not None:
            if len(derived) >= _MAX_DERIVED:
                derived.clear()
            derived[entry] = salt
        return salt


class CacheSalts:
    """The secret, configured or minted once into Redis, and the salts derived with it."""

    def __init__(self, shared: SharedSecret) -> None:
        """`shared`: the secret's store, gateway/redis/shared_secret.py (keys.CACHE_SALT_SECRET)."""
        self._shared = shared
        self._derived: dict[tuple[str, str, str, str | None], str | None] = {}  # for SaltScope

    async def secret(self) -> bytes:
        """Read from Redis once per process (one read at a time); 503 while Redis cannot say."""
        known = self._shared.known
        return known if known is not None else await self._shared.get()

    async def scope(self, team_id: str, key_id: str, client: str | None) -> SaltScope:
        return SaltScope(await self.secret(), team_id, key_id, client, self._derived)
