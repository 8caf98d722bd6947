"""Ten thousand users and a thousand groups provisioned through the API, then each request an IdP
makes reads a bounded amount from Redis, whatever the directory's size: counted as the bytes Redis
sent the gateway for that one request (INFO's total_net_output_bytes, on a Redis of its own)."""

from __future__ import annotations

import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import redis

from gateway.dev.embedded_redis import EmbeddedRedis
from gateway.redis import keys as redis_keys
from gateway.scim.models import MAX_RESULTS
from tests.conftest import GatewayFactory
from tests.scim.conftest import TOKEN, Scim

USERS, GROUPS, MEMBERS_PER_GROUP = 10_000, 1_000, 10
# What one request may read, far below the directory's size (asserted above a megabyte).
BOUND_BYTES = 32 * 1024
PATCH = "urn:ietf:params:scim:api:messages:2.0:PatchOp"


def q(path: str, **params: Any) -> str:
    return path + "?" + urllib.parse.urlencode(params, quote_via=urllib.parse.quote)


@pytest.mark.timeout(600)
def test_requests_read_a_bounded_amount_from_a_large_directory(make_gateway: GatewayFactory) -> None:
    with EmbeddedRedis() as server, make_gateway(redis_url=server.url, scim_token=TOKEN) as gw:
        gw.secrets_created.append(TOKEN)
        scim = Scim(gw.url)

        def user(i: int) -> str:
            body = {
                "schemas": ["urn:ietf:params:scim:schemas:core:2.0:User"],
                "userName": f"person-{i:05d}@example.com",
                "externalId": f"ext-{i:05d}",
                "name": {"givenName": "Person", "familyName": f"Number {i}"},
                "emails": [{"value": f"person-{i:05d}@example.com", "primary": True, "type": "work"}],
                "active": True,
            }
            created: str = scim.ok("POST", "/Users", body, status=201)["id"]
            return created

        def group(i: int, members: list[str]) -> str:
            body = {
                "schemas": ["urn:ietf:params:scim:schemas:core:2.0:Group"],
                "displayName": f"team-{i:04d}",
                "members": [{"value": m} for m in members],
            }
            created: str = scim.ok("POST", "/Groups", body, status=201)["id"]
            return created

        with ThreadPoolExecutor(8) as pool:
            user_ids = list(pool.map(user, range(USERS)))
            chunks = [user_ids[i * MEMBERS_PER_GROUP : (i + 1) * MEMBERS_PER_GROUP] for i in range(GROUPS)]
            group_ids = list(pool.map(group, range(GROUPS), chunks))

        client = redis.Redis.from_url(server.url)
        directory_bytes = client.memory_usage(redis_keys.scim("users")) or 0
        assert directory_bytes > 1024 * 1024

        def read_by(method: str, path: str, body: Any = None) -> int:
            before = int(client.info("stats")["total_net_output_bytes"])
            scim.ok(method, path, body)
            return int(client.info("stats")["total_net_output_bytes"]) - before

        costs = {
            "userName filter": read_by("GET", q("/Users", filter='userName eq "PERSON-04321@example.com"')),
            "externalId filter": read_by("GET", q("/Users", filter='externalId eq "ext-09999"')),
            "a page deep in": read_by("GET", q("/Users", startIndex=7_000, count=10)),
            "a group by name": read_by(
                "GET", q("/Groups", filter='displayName eq "team-0500"', excludedAttributes="members")
            ),
            "a user": read_by("GET", f"/Users/{user_ids[1234]}"),
            "a member added": read_by(
                "PATCH",
                f"/Groups/{group_ids[7]}",
                {
                    "schemas": [PATCH],
                    "Operations": [{"op": "add", "path": "members", "value": [{"value": user_ids[0]}]}],
                },
            ),
        }
        over = {name: cost for name, cost in costs.items() if cost > BOUND_BYTES}
        assert not over, (over, directory_bytes)
        # A full page reads its own users and their groups: bounded by the page, not the directory.
        full_page = read_by("GET", q("/Users", startIndex=4_000, count=MAX_RESULTS))
        assert full_page < MAX_RESULTS * 1024 < directory_bytes / 20, full_page
        total = scim.ok("GET", q("/Users", count=1))["totalResults"]
        assert total == USERS
        assert scim.ok("GET", q("/Groups", count=1))["totalResults"] == GROUPS
