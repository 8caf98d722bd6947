"""The JWKS cache asks the IdP at most once per interval however many unknown kids arrive, at
once or in a row, and keeps serving the keys it has while the IdP is down. Counted, not timed:
the clock is the test's."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from joserfc.jwk import RSAKey

from gateway.identity.oidc import IdpUnavailable, JwksCache

ISSUER = "https://idp.example"


class FakeIdp:
    def __init__(self) -> None:
        self.keys = [RSAKey.generate_key(2048, parameters={"kid": "k1"})]
        self.requests: list[str] = []
        self.down = False
        self.extra: list[dict[str, Any]] = []

    async def fetch(self, url: str) -> Any:
        self.requests.append(url)
        await asyncio.sleep(0)  # others run while the "request" is out
        if self.down:
            raise OSError("connection refused")
        if url.endswith("/.well-known/openid-configuration"):
            return {"issuer": ISSUER, "jwks_uri": f"{ISSUER}/jwks"}
        return {"keys": [k.as_dict(private=False) for k in self.keys] + self.extra}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _cache(idp: FakeIdp, clock: Clock) -> JwksCache:
    return JwksCache(ISSUER, fetch=idp.fetch, clock=clock, min_refetch_s=30, max_age_s=300)


def test_a_flood_of_unknown_kids_fetches_once_per_interval() -> None:
    idp, clock = FakeIdp(), Clock()
    cache = _cache(idp, clock)

    async def flood() -> None:
        await asyncio.gather(*(cache.keys(f"bogus-{i}") for i in range(200)))
        for i in range(200):
            await cache.keys(f"bogus-again-{i}")

    async def run() -> None:
        await flood()
        assert idp.requests == [f"{ISSUER}/.well-known/openid-configuration", f"{ISSUER}/jwks"]
        assert cache.fetches == 1
        clock.now += 30  # one interval later: one more fetch, not one per kid
        await flood()
        assert cache.fetches == 2
        assert idp.requests[-1] == f"{ISSUER}/jwks"

    asyncio.run(run())


def test_a_key_rotated_in_is_found_within_the_interval() -> None:
    idp, clock = FakeIdp(), Clock()
    cache = _cache(idp, clock)

    async def run() -> None:
        assert "k1" in _kids(await cache.keys("k1"))
        idp.keys.append(RSAKey.generate_key(2048, parameters={"kid": "k2"}))
        clock.now += 29
        assert "k2" not in _kids(await cache.keys("k2"))  # asked too recently
        clock.now += 1
        assert "k2" in _kids(await cache.keys("k2"))

    asyncio.run(run())


def test_keys_seen_keep_working_while_the_idp_is_down() -> None:
    idp, clock = FakeIdp(), Clock()
    cache = _cache(idp, clock)

    async def run() -> None:
        await cache.keys("k1")
        idp.down = True
        clock.now += 10_000  # past the keys' age: a refresh is tried, and fails
        assert "k1" in _kids(await cache.keys("k1"))
        with pytest.raises(IdpUnavailable):
            await cache.keys("never-seen")

    asyncio.run(run())


def test_an_idp_down_from_the_start_is_unavailable_not_unauthorized() -> None:
    idp, clock = FakeIdp(), Clock()
    idp.down = True
    with pytest.raises(IdpUnavailable):
        asyncio.run(_cache(idp, clock).keys("k1"))


def test_hmac_keys_and_encryption_keys_in_the_jwks_are_ignored() -> None:
    idp, clock = FakeIdp(), Clock()
    idp.extra = [
        {"kty": "oct", "kid": "mac", "k": "c2VjcmV0"},
        {**idp.keys[0].as_dict(private=False), "kid": "enc", "use": "enc"},
    ]
    assert _kids(asyncio.run(_cache(idp, clock).keys("mac"))) == {"k1"}


def test_a_discovery_document_naming_another_issuer_is_refused() -> None:
    idp, clock = FakeIdp(), Clock()

    async def lying(url: str) -> Any:
        if url.endswith("openid-configuration"):
            return {"issuer": "https://evil.example", "jwks_uri": "https://evil.example/jwks"}
        return await idp.fetch(url)

    with pytest.raises(IdpUnavailable):
        asyncio.run(JwksCache(ISSUER, fetch=lying, clock=clock).keys("k1"))


def _kids(keys: Any) -> set[str]:
    return {k.kid for k in keys.keys}
