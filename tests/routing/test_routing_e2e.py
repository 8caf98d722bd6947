"""Routing decisions through the real gateway: load, canary weights, session affinity, fallbacks."""

from __future__ import annotations

import concurrent.futures
import threading

from openai.types.chat import ChatCompletionMessageParam

from gateway.model_table import HealthConfig, ModelConfig, ModelTable, PoolConfig, RoutingConfig
from tests.conftest import GatewayFactory
from tests.http import post
from tests.routing.conftest import WorkerFactory, chat, endpoint_view, metric
from tests.servers import free_port
from tests.waiting import wait_until

QUICK_PROBES = HealthConfig(probe_interval=0.2)


def test_least_loaded_avoids_an_endpoint_whose_engine_is_queueing(
    make_gateway: GatewayFactory, workers: WorkerFactory
) -> None:
    fast_a, url_a = workers()
    fast_b, url_b = workers()
    slow, slow_url = workers(capacity=1)
    table = ModelTable(
        (
            ModelConfig(
                name="m",
                endpoints=(url_a, slow_url, url_b),
                routing=RoutingConfig(policy="least_loaded"),
                # Load scraped every second, each scrape allowed a second and stale after three
                # (as in test_prefix_e2e): at 0.2 s a busy moment of the machine let the scraped
                # queue go stale, or failed it, and the slow engine looked idle for no reason the
                # test set.
                health=HealthConfig(probe_interval=60.0),
            ),
        )
    )
    with make_gateway(table) as gw:
        key = gw.new_key()["key"]
        # Other traffic (not through this gateway) keeps the slow engine busy with a queue, held
        # until the gateway's requests are done: however long they take, the queue is there.
        slow.hold = True
        body = {"model": "m", "messages": [{"role": "user", "content": "x"}]}
        busy = [
            threading.Thread(target=post, args=(f"{slow_url}/v1/chat/completions", body), daemon=True)
            for _ in range(3)
        ]
        for thread in busy:
            thread.start()
        wait_until(
            lambda: (endpoint_view(gw, "m", slow_url)["load"] or {}).get("waiting", 0) >= 1,
            10,
            "the gateway scraped the slow engine's queue",
        )
        for _ in range(30):
            assert chat(gw, key).status == 200
        assert slow.requests == 3, "least_loaded sent requests to the queueing engine"
        assert fast_a.requests > 5
        assert fast_b.requests > 5
        slow.hold = False
        for thread in busy:
            thread.join(timeout=10)


def test_canary_weights_split_90_10(make_gateway: GatewayFactory, workers: WorkerFactory) -> None:
    stable, stable_url = workers()
    canary, canary_url = workers()
    pools = (
        PoolConfig(name="m/stable", weight=9, endpoints=(stable_url,)),
        PoolConfig(name="m/canary", weight=1, endpoints=(canary_url,)),
    )
    table = ModelTable((ModelConfig(name="m", pools=pools),))
    with make_gateway(table) as gw:
        key = gw.new_key()["key"]
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            statuses = list(pool.map(lambda _: chat(gw, key, max_tokens=1).status, range(1000)))
        assert statuses.count(200) == 1000
        assert stable.requests + canary.requests == 1000
        # Binomial(1000, 0.1): the standard deviation is about 9.5 requests.
        assert 70 <= canary.requests <= 130, canary.requests


def test_session_affinity_sticks_spreads_and_moves_off_a_sick_endpoint(
    make_gateway: GatewayFactory, workers: WorkerFactory
) -> None:
    started = [workers() for _ in range(3)]
    table = ModelTable(
        (
            ModelConfig(
                name="m",
                endpoints=tuple(url for _, url in started),
                routing=RoutingConfig(policy="session_affinity"),
                health=QUICK_PROBES,
            ),
        )
    )
    with make_gateway(table) as gw:
        key = gw.new_key()["key"]
        for _ in range(20):
            assert chat(gw, key, user="alice").status == 200
        homes = [(w, url) for w, url in started if w.by_user["alice"]]
        assert len(homes) == 1, "one user's requests went to several endpoints"
        home, home_url = homes[0]
        assert home.by_user["alice"] == 20
        for _ in range(10):  # the header wins over the user field, and sticks as well
            assert chat(gw, key, user="x", headers={"x-session-id": "s-1"}).status == 200
        assert sum(1 for w, _ in started if w.by_user["x"]) == 1
        for i in range(30):
            assert chat(gw, key, user=f"user-{i}").status == 200
        assert sum(1 for w, _ in started if any(w.by_user[f"user-{i}"] for i in range(30))) == 3

        home.health_status = 500  # its probe fails: out of rotation
        wait_until(lambda: endpoint_view(gw, "m", home_url)["state"] == "unhealthy", 3, "probe noticed")
        before = home.requests
        for _ in range(10):
            assert chat(gw, key, user="alice").status == 200
        assert home.requests == before
        assert sum(1 for w, _ in started if w is not home and w.by_user["alice"]) == 1, "not sticky"


def test_fallback_model_answers_when_the_pool_has_no_healthy_endpoint(
    make_gateway: GatewayFactory, workers: WorkerFactory
) -> None:
    backup, backup_url = workers(models=("backup-wire",))
    dead = f"http://127.0.0.1:{free_port()}"
    table = ModelTable(
        (
            ModelConfig(name="primary", endpoints=(dead,), fallbacks=("backup",)),
            ModelConfig(name="backup", endpoints=(backup_url,), upstream_model="backup-wire"),
        )
    )
    with make_gateway(table) as gw:
        client = gw.client(gw.new_key()["key"])
        hello: list[ChatCompletionMessageParam] = [{"role": "user", "content": "hi"}]
        raw = client.chat.completions.with_raw_response.create(model="primary", messages=hello)
        assert raw.headers["x-sluicegate-model"] == "backup"
        assert raw.parse().model == "backup"
        with client.chat.completions.with_streaming_response.create(
            model="primary", messages=hello, stream=True
        ) as streamed:
            assert streamed.headers["x-sluicegate-model"] == "backup"
            assert {chunk.model for chunk in streamed.parse()} == {"backup"}
        assert backup.by_model["backup-wire"] == 2
        assert metric(gw, "sluicegate_fallbacks_total", model="primary", fallback="backup") == 2
        # The backup model itself answers under its own name too.
        direct = client.chat.completions.with_raw_response.create(model="backup", messages=hello)
        assert direct.headers["x-sluicegate-model"] == "backup"
        assert direct.parse().model == "backup"
