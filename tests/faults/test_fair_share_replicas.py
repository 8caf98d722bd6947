"""Token fair share across three real gateway processes sharing one Redis, in front of one worker.

Every request is queued before the worker serves any (each replica has one slot, so every
dispatch after the first is a choice between waiting teams), then the worker serves them as fast
as it can. What is asserted is the service counted at the worker while every team was still
backlogged on every replica, never a time: the bounds are the algorithm's own (VTC: two backlogged
teams' weighted service differs by at most about 2 requests' cost, plus one request in flight per
replica), so they hold however fast or slow the machine is."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from gateway.dev.embedded_redis import EmbeddedRedis
from tests.faults.conftest import GatewayProcess, StartGateway
from tests.routing.token_worker import TeamLoad, TokenWorker, backlog_everywhere, pool_yaml, while_backlogged
from tests.servers import run_uvicorn

REPLICAS = 3


@pytest.fixture
def worker() -> Iterator[tuple[TokenWorker, str]]:
    token_worker = TokenWorker()
    with run_uvicorn(token_worker.app()) as url:
        yield token_worker, url
    token_worker.held = False


def _replicas(start_gateway: StartGateway, redis: EmbeddedRedis, worker_url: str) -> list[GatewayProcess]:
    return [start_gateway(redis.url, models=pool_yaml(worker_url, "tokens")) for _ in range(REPLICAS)]


def _team(gw: GatewayProcess, name: str, weight: int) -> str:
    gw.admin.call("POST", "/admin/v1/teams", {"name": name, "weight": weight})
    return str(gw.new_key(name)["key"])


def test_weights_1_2_4_get_their_share_of_tokens_across_three_replicas(
    own_redis: EmbeddedRedis, start_gateway: StartGateway, worker: tuple[TokenWorker, str]
) -> None:
    token_worker, url = worker
    gws = _replicas(start_gateway, own_redis, url)
    weights = {"one": 1, "two": 2, "four": 4}
    teams = {
        name: TeamLoad(_team(gws[0], name, weight), weight, per_replica=40, prompt_tokens=100, max_tokens=1)
        for name, weight in weights.items()
    }
    sent = asyncio.run(backlog_everywhere([gw.url for gw in gws], teams, token_worker))
    # The first request on each replica took its slot before the others were sent: not counted.
    result = while_backlogged(token_worker.served, sent, weights, skip=REPLICAS)

    largest = 102.0  # 100 prompt tokens + 2 x 1, weight 1
    assert result.max_gap <= 2 * largest + REPLICAS * largest, result
    for name, weight in weights.items():
        assert abs(result.shares[name] - weight / 7) <= 0.05, result
    assert len(token_worker.served) == sum(sent.values())


def test_a_team_sending_10x_the_requests_with_8x_the_prompt_gets_no_more_than_its_share(
    own_redis: EmbeddedRedis, start_gateway: StartGateway, worker: tuple[TokenWorker, str]
) -> None:
    token_worker, url = worker
    gws = _replicas(start_gateway, own_redis, url)
    weights = {"normal": 1, "adversary": 1}
    teams = {
        "normal": TeamLoad(_team(gws[0], "normal", 1), 1, per_replica=12, prompt_tokens=100, max_tokens=1),
        "adversary": TeamLoad(
            _team(gws[0], "adversary", 1), 1, per_replica=120, prompt_tokens=800, max_tokens=1
        ),
    }
    sent = asyncio.run(backlog_everywhere([gw.url for gw in gws], teams, token_worker))
    result = while_backlogged(token_worker.served, sent, weights, skip=REPLICAS)

    largest = 802.0
    # Its weighted service stays within the bound of the other team's, whatever it sends.
    assert result.service["adversary"] - result.service["normal"] <= 2 * largest + REPLICAS * largest, result
    assert result.max_gap <= 2 * largest + REPLICAS * largest, result
    # By request count (the old queue) it would have had 8 of every 9 tokens.
    assert result.shares["adversary"] < 0.8, result
