"""prefix_affinity through real gateways (two replicas sharing one Redis) in front of programmable
workers: a multi-turn conversation sticks to one engine, on either replica, and moves when that
engine's scraped queue says it is saturated. Saturation is the worker's reported
`vllm:num_requests_waiting`, set by the test: nothing here depends on timing (probes and scrapes
are given a second each: QUICK_PROBES)."""

from __future__ import annotations

import secrets
from typing import Any

from openai.types.chat import ChatCompletionMessageParam

from gateway.dev.embedded_redis import EmbeddedRedis
from gateway.model_table import HealthConfig, ModelConfig, ModelTable, RoutingConfig
from tests.conftest import Gateway, GatewayFactory
from tests.routing.conftest import WorkerFactory, endpoint_view, metric
from tests.routing.worker import ProgrammableWorker
from tests.waiting import wait_until

# Load scraped every second (monitor.SCRAPE_INTERVAL_S), each scrape allowed a second and stale
# only after three; /health probed once at the start. Not 0.2 s: on a loaded machine a 0.2 s
# probe or scrape timed out, or a late monitor round let the scraped queue go stale (0.6 s), and
# the endpoint left the candidates or lost its queue: a conversation moved for no reason the
# test set, or went to the engine it had made saturated.
QUICK_PROBES = HealthConfig(probe_interval=60.0)


def _table(urls: tuple[str, ...]) -> ModelTable:
    routing = RoutingConfig(policy="prefix_affinity")
    return ModelTable((ModelConfig(name="m", endpoints=urls, routing=routing, health=QUICK_PROBES),))


class Conversation:
    """One user's chat, growing a turn at a time; `user` names it on the workers (by_user)."""

    def __init__(self) -> None:
        self.user = "conv-" + secrets.token_hex(4)
        system = f"You are assistant {self.user}. " + "Answer briefly and cite sources. " * 60
        self.messages: list[ChatCompletionMessageParam] = [{"role": "system", "content": system}]

    def turn(self, gw: Gateway, key: str, text: str) -> None:
        self.messages.append({"role": "user", "content": text + " Tell me more about it, please. " * 8})
        answer: Any = gw.client(key).chat.completions.create(
            model="m", messages=self.messages, user=self.user
        )
        self.messages.append({"role": "assistant", "content": answer.choices[0].message.content})


def _blocks(gw: Gateway) -> float:
    return metric(gw, "sluicegate_prefix_index_blocks")


def _served(workers: list[ProgrammableWorker], user: str) -> list[int]:
    return [w.by_user[user] for w in workers]


def test_a_conversation_sticks_to_one_engine_and_moves_when_it_is_saturated(
    make_gateway: GatewayFactory, workers: WorkerFactory
) -> None:
    started = [workers() for _ in range(3)]
    pool = [w for w, _ in started]
    # One replica: nothing to share (and nothing written to the session's Redis).
    with make_gateway(_table(tuple(url for _, url in started)), prefix_share_interval_s=0) as gw:
        key = gw.new_key()["key"]
        talk = Conversation()
        for i in range(6):
            talk.turn(gw, key, f"question {i}")
        counts = _served(pool, talk.user)
        assert sorted(counts) == [0, 0, 6], counts
        home = counts.index(6)
        assert metric(gw, "sluicegate_prefix_routing_total", pool="m", outcome="hit") == 5

        # Its engine now reports a queue of 10: past the threshold (each queued request counts 4).
        home_worker, home_url = started[home]
        home_worker.waiting = 10
        wait_until(
            lambda: (endpoint_view(gw, "m", home_url)["load"] or {}).get("waiting", 0) == 10,
            10,
            "the gateway scraped the queue",
        )
        talk.turn(gw, key, "question 6")
        counts = _served(pool, talk.user)
        assert counts[home] == 6, "sent to the saturated engine"
        new_home = next(i for i, c in enumerate(counts) if i != home and c == 1)
        assert metric(gw, "sluicegate_prefix_routing_total", pool="m", outcome="saturated") == 1

        # The conversation now lives on its new engine, and stays there once the old one recovers.
        home_worker.waiting = 0
        wait_until(
            lambda: (endpoint_view(gw, "m", home_url)["load"] or {}).get("waiting", 1) == 0,
            10,
            "the gateway scraped the empty queue",
        )
        for i in range(7, 10):
            talk.turn(gw, key, f"question {i}")
        counts = _served(pool, talk.user)
        assert counts[new_home] == 4, counts
        assert counts[home] == 6, counts


def test_two_replicas_send_one_conversation_to_the_same_engine(
    make_gateway: GatewayFactory, workers: WorkerFactory
) -> None:
    started = [workers() for _ in range(4)]
    pool = [w for w, _ in started]
    table = _table(tuple(url for _, url in started))
    # A Redis of this test's own: the shared index starts empty, so its growth is this test's.
    with (
        EmbeddedRedis() as redis,
        make_gateway(table, redis_url=redis.url) as one,
        make_gateway(table, redis_url=redis.url) as two,
    ):
        key = one.new_key()["key"]
        talk = Conversation()
        talk.turn(one, key, "first question")
        home = _served(pool, talk.user).index(1)
        blocks = metric(one, "sluicegate_prefix_index_blocks")
        assert blocks >= 3
        # Replica two learns the chain through Redis (its index fills), then routes the next
        # turns to the same engine; and replica one learns the turns replica two routed.
        wait_until(lambda: metric(two, "sluicegate_prefix_index_blocks") == blocks, 10, "two read one's")
        for i in range(3):
            talk.turn(two, key, f"question {i}")
        assert metric(two, "sluicegate_prefix_routing_total", pool="m", outcome="hit") == 3
        wait_until(
            lambda: (
                metric(one, "sluicegate_prefix_index_blocks") == metric(two, "sluicegate_prefix_index_blocks")
            ),
            10,
            "replica one read replica two's blocks",
        )
        talk.turn(one, key, "last question")
        assert metric(one, "sluicegate_prefix_routing_total", pool="m", outcome="hit") == 1
        assert _served(pool, talk.user)[home] == 5, _served(pool, talk.user)
