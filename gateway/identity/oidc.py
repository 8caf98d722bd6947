"""The identity provider's published keys: discovery once, then its JWKS, cached.

    discovery  GET <issuer>/.well-known/openid-configuration, whose `issuer` must equal ours
               exactly (OIDC Discovery §4.3) and whose `jwks_uri` must use the issuer's scheme
    JWKS       kept for KEYS_MAX_AGE_S, then fetched again on next use; a token whose `kid` is
               unknown fetches it again at once, but at most once per MIN_REFETCH_S across all
               callers, so a flood of made-up kids never floods the IdP, while a key the IdP has
               just rotated in is accepted within that interval

Only asymmetric signing keys are kept (RSA, EC): an HMAC key in a JWKS would let anyone who read
the public set sign tokens. Fetches are bounded in time and size, follow no redirect, and one at a
time (a lock), so a thousand callers at a cold cache make one request. An IdP that is down leaves
the cached keys working: only a token signed by a key not seen yet cannot be checked
(`IdpUnavailable`, a 503 that says so).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson
from joserfc.errors import JoseError
from joserfc.jwk import KeySet

from gateway.errors import ErrorCode, GatewayError

log = logging.getLogger("sluicegate.identity")

KEYS_MAX_AGE_S = 300.0
MIN_REFETCH_S = 30.0
FETCH_TIMEOUT_S = 5.0
MAX_DOCUMENT_BYTES = 512 * 1024
_KEY_TYPES = ("RSA", "EC")

Fetch = Callable[[str], Awaitable[Any]]


class IdpUnavailable(GatewayError):
    def __init__(self) -> None:
        # Never the IdP's address: it may be an internal one.
        super().__init__(
            ErrorCode.IDP_UNAVAILABLE,
            "The identity provider cannot be reached to check this token's signing key; "
            "tokens signed with keys seen before keep working. Try again shortly.",
        )


@dataclass(frozen=True, slots=True)
class OidcSettings:
    issuer: str
    audience: str
    groups_claim: str = "groups"
    subject_claim: str = "sub"
    # Clients whose tokens may carry several audiences (`azp`/`client_id` must be one of them).
    clients: frozenset[str] = frozenset()
    platform_admin_groups: frozenset[str] = frozenset()
    # How often an unknown kid may fetch the JWKS again (SLUICEGATE_OIDC_JWKS_MIN_REFETCH).
    jwks_min_refetch_s: float = MIN_REFETCH_S


async def fetch_json(url: str) -> Any:
    """One bounded GET: no redirect, FETCH_TIMEOUT_S, MAX_DOCUMENT_BYTES. Every failure, a
    dropped connection included, is an OSError, a TimeoutError or a ValueError."""
    try:
        return await _fetch_json(url)
    except aiohttp.ClientError as exc:
        raise ValueError(f"identity provider unreachable ({type(exc).__name__})") from None


async def _fetch_json(url: str) -> Any:
    timeout = aiohttp.ClientTimeout(total=FETCH_TIMEOUT_S)
    async with (
        aiohttp.ClientSession(timeout=timeout) as session,
        session.get(url, allow_redirects=False, headers={"accept": "application/json"}) as response,
    ):
        if response.status != 200:
            raise ValueError(f"HTTP {response.status}")
        return orjson.loads(await read_bounded(response))


async def read_bounded(response: aiohttp.ClientResponse) -> bytes:
    """The whole body, however many reads it arrives in (content.read(n) gives only what is
    buffered), refused past MAX_DOCUMENT_BYTES; a broken connection is a ValueError like any
    other bad answer."""
    body = bytearray()
    try:
        async for chunk in response.content.iter_chunked(64 * 1024):
            body += chunk
            if len(body) > MAX_DOCUMENT_BYTES:
                raise ValueError("document too large")
    except aiohttp.ClientError as exc:
        raise ValueError(f"broken answer ({type(exc).__name__})") from None
    return bytes(body)


class Discovery:
    """The issuer's discovery document, fetched on first use and kept: its endpoints (authorize,
    token, device authorization, JWKS) do not move while the gateway runs. A failed fetch is tried
    again on the next use."""

    def __init__(self, issuer: str, *, fetch: Fetch = fetch_json) -> None:
        self.issuer = issuer
        self._fetch = fetch
        self._document: dict[str, Any] | None = None
        self._lock = asyncio.Lock()

    async def document(self) -> dict[str, Any]:
        if self._document is not None:
            return self._document
        async with self._lock:
            if self._document is None:
                url = self.issuer.rstrip("/") + "/.well-known/openid-configuration"
                document = await self._fetch(url)
                if not isinstance(document, dict) or document.get("issuer") != self.issuer:
                    raise ValueError("the discovery document names another issuer")
                self._document = document
        return self._document

    async def endpoint(self, name: str) -> str | None:
        """One of the document's endpoints, only on the issuer's own scheme (an https issuer's
        endpoints are https); None when the document has none."""
        uri = (await self.document()).get(name)
        scheme = self.issuer.split(":", 1)[0]
        if not isinstance(uri, str) or not uri.startswith(f"{scheme}://"):
            return None
        return uri


class JwksCache:
    def __init__(
        self,
        issuer: str,
        *,
        fetch: Fetch = fetch_json,
        clock: Callable[[], float] = time.monotonic,
        min_refetch_s: float = MIN_REFETCH_S,
        max_age_s: float = KEYS_MAX_AGE_S,
    ) -> None:
        self.discovery = Discovery(issuer, fetch=fetch)
        self._fetch = fetch
        self._clock = clock
        self._min_refetch_s = min_refetch_s
        self._max_age_s = max_age_s
        self._keys: KeySet | None = None
        self._kids: frozenset[str] = frozenset()
        self._fetched_at = 0.0
        self._tried_at: float | None = None
        self._last_try_failed = False
        self._jwks_uri: str | None = None
        self._lock = asyncio.Lock()
        self.fetches = 0  # how many times the IdP was asked: what the flood tests count

    async def keys(self, kid: str | None) -> KeySet:
        """The key set to check a token signed with `kid`: fetched again when stale, or when the
        kid is unknown and the last try is old enough."""
        now = self._clock()
        known = self._keys is not None and (kid is None or kid in self._kids)
        stale = self._keys is None or now - self._fetched_at >= self._max_age_s
        if known and not stale:
            assert self._keys is not None
            return self._keys
        async with self._lock:
            # Someone else may have fetched while this call waited for the lock.
            known = self._keys is not None and (kid is None or kid in self._kids)
            stale = self._keys is None or self._clock() - self._fetched_at >= self._max_age_s
            may_try = self._tried_at is None or self._clock() - self._tried_at >= self._min_refetch_s
            if (not known or stale) and may_try:
                await self._refresh()
        if self._keys is None or (self._last_try_failed and kid is not None and kid not in self._kids):
            # A key never seen, and the IdP could not be asked: say so, not "bad token".
            raise IdpUnavailable()
        return self._keys

    async def _refresh(self) -> None:
        self._tried_at = self._clock()
        self.fetches += 1
        try:
            if self._jwks_uri is None:
                self._jwks_uri = await self.discovery.endpoint("jwks_uri")
                if self._jwks_uri is None:
                    raise ValueError("the discovery document has no usable jwks_uri")
            document = await self._fetch(self._jwks_uri)
            keys = _signing_keys(document)
        except (aiohttp.ClientError, TimeoutError, OSError, ValueError, JoseError) as exc:
            # The reason, never the IdP's answer: it is untrusted and may be anything.
            log.warning("identity provider keys not refreshed: %s", type(exc).__name__)
            self._last_try_failed = True
            return
        self._last_try_failed = False
        self._keys, self._kids = keys
        self._fetched_at = self._clock()


def _signing_keys(document: Any) -> tuple[KeySet, frozenset[str]]:
    if not isinstance(document, dict) or not isinstance(document.get("keys"), list):
        raise ValueError("not a JWKS")
    usable = [
        k
        for k in document["keys"]
        if isinstance(k, dict) and k.get("kty") in _KEY_TYPES and k.get("use", "sig") == "sig"
    ]
    if not usable:
        raise ValueError("the JWKS has no signing key")
    kids = frozenset(str(k["kid"]) for k in usable if isinstance(k.get("kid"), str))
    return KeySet.import_key_set({"keys": usable}), kids
