"""A real gateway for the generated-input suite: its own redis-server (the teams and keys that
generated admin calls create stay out of every other test's data), the session's fake worker,
real uvicorn, and a real team and API key made through the admin API.

The key has generous limits, so generated requests run the token-reservation path of admission
(huge `max_tokens` included) without limiting one another. The gateway trusts loopback as a proxy
and every generated request names its own client in X-Forwarded-For: the wrong admin tokens the
suite sends on purpose would otherwise lock its one address out of the admin API (the lockout is
its own tests' business), and every later admin case would only see that 429."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from gateway.dev.embedded_redis import EmbeddedRedis
from tests.conftest import Gateway, GatewayFactory


@dataclass(frozen=True)
class Live:
    gateway: Gateway
    api_key: str
    key_id: str
    team: str
    _clients: Iterator[int] = field(default_factory=itertools.count)

    def new_client(self) -> str:
        """A client address no earlier request used (documentation range 198.18.0.0/15)."""
        n = next(self._clients)
        return f"198.{18 + (n >> 16) % 2}.{(n >> 8) & 255}.{n & 255}"

    @property
    def url(self) -> str:
        return self.gateway.url

    @property
    def admin_token(self) -> str:
        return self.gateway.admin_token


@pytest.fixture(scope="module")
def live(make_gateway_module: GatewayFactory, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    # The Files and Batch API on too, so its routes are exercised, not answered 404.
    files = tmp_path_factory.mktemp("files")
    with (
        EmbeddedRedis() as redis,
        make_gateway_module(
            redis_url=redis.url, trusted_proxies=("127.0.0.1/32",), files_url=f"file://{files}"
        ) as gw,
    ):
        team = gw.new_team()
        gw.admin.call("PATCH", f"/admin/v1/teams/{team}", {"tpm": 10**12, "daily_tokens": 10**15})
        key = gw.new_key(team, rpm=10**9, tpm=10**12, max_concurrency=1000)
        yield Live(gateway=gw, api_key=key["key"], key_id=key["id"], team=team)
