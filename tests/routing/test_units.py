"""The pure parts: policies, the ejection state machine (on an injected clock), the load parser,
and a pool's slots and queue hand-off."""

from __future__ import annotations

import asyncio
import random
from collections import Counter

import pytest

from gateway.errors import ConfigError, GatewayError
from gateway.model_file import parse_model
from gateway.model_table import HealthConfig, ModelConfig, RoutingConfig
from gateway.observability.metrics import Metrics
from gateway.routing import health
from gateway.routing.endpoint import Endpoint, EndpointState
from gateway.routing.load import Load, apply_load, parse_load
from gateway.routing.policy import RouteRequest, least_loaded, least_outstanding, session_affinity
from gateway.routing.pool import Pool
from gateway.routing.unavailable import PoolUnavailable

REQ = RouteRequest("m")


def _endpoints(n: int) -> list[Endpoint]:
    return [Endpoint(f"http://10.0.0.{i}:8000") for i in range(n)]


def test_least_outstanding_never_picks_the_busiest_of_two() -> None:
    a, b = _endpoints(2)
    a.inflight = 5
    rng = random.Random(0)
    assert all(least_outstanding([a, b], REQ, rng) is b for _ in range(50))


def test_least_loaded_prefers_no_queue_then_fewer_running_and_shares_ties() -> None:
    rng = random.Random(0)
    queueing, busy, idle = _endpoints(3)
    apply_load(queueing, Load(running=1, waiting=2, kv_cache_usage=0.9), now=0)
    apply_load(busy, Load(running=3, waiting=0, kv_cache_usage=0.5), now=0)
    apply_load(idle, Load(running=0, waiting=0, kv_cache_usage=0.0), now=0)
    assert least_loaded([queueing, busy, idle], REQ, rng) is idle
    idle.inflight = 4  # sent since the scrape: now the busiest
    assert least_loaded([queueing, busy, idle], REQ, rng) is busy
    ties = _endpoints(4)
    counts = Counter(least_loaded(ties, REQ, rng).url for _ in range(4000))
    assert min(counts.values()) > 800, counts


def test_session_affinity_is_sticky_spreads_and_moves_only_the_lost_sessions() -> None:
    rng = random.Random(0)
    eps = _endpoints(5)
    homes = {f"user-{i}": session_affinity(eps, RouteRequest("m", user=f"user-{i}"), rng) for i in range(500)}
    assert all(session_affinity(eps, RouteRequest("m", user=u), rng) is e for u, e in homes.items())
    assert min(Counter(e.url for e in homes.values()).values()) > 60
    lost = eps[0]
    rest = eps[1:]
    moved = {u: session_affinity(rest, RouteRequest("m", user=u), rng) for u in homes}
    assert all(moved[u] is e for u, e in homes.items() if e is not lost)
    # The session header wins over the user field; no key at all is least_loaded.
    assert session_affinity(eps, RouteRequest("m", user="a", session_id="s"), rng) is session_affinity(
        eps, RouteRequest("m", user="b", session_id="s"), rng
    )
    eps[1].inflight, eps[2].inflight, eps[3].inflight, eps[4].inflight = 1, 1, 1, 1
    assert session_affinity(eps, REQ, rng) is eps[0]


def test_session_affinity_leaves_an_engine_that_queues_when_another_does_not() -> None:
    rng = random.Random(0)
    eps = _endpoints(3)
    home = session_affinity(eps, RouteRequest("m", user="u"), rng)
    assert isinstance(home, Endpoint)
    apply_load(home, Load(running=4, waiting=3, kv_cache_usage=1.0), now=0)
    assert session_affinity(eps, RouteRequest("m", user="u"), rng) is not home


def _fail(team: str) -> health.Verdict:
    return health.Verdict(health.VerdictKind.REQUEST_FAILED, team)


def _record(
    ep: Endpoint, verdict: health.Verdict, config: HealthConfig, now: float = 0, *, trial: bool = False
) -> health.Change:
    return health.record(ep, verdict, config, now, trial=trial)


def test_ejection_backoff_trial_and_reset() -> None:
    config = HealthConfig(failures_to_eject=3, ejection_base=2, ejection_max=5)
    ep = Endpoint("http://e")
    broken = health.ENDPOINT_FAILED
    assert _record(ep, broken, config) is health.Change.NONE
    assert _record(ep, broken, config) is health.Change.NONE
    _record(ep, health.SERVED, config)  # not consecutive any more
    changes = [_record(ep, broken, config) for _ in range(3)]
    assert changes == [health.Change.NONE, health.Change.NONE, health.Change.EJECTED]
    assert (ep.state, ep.ejected_until, ep.usable) == (EndpointState.EJECTED, 2, False)
    # A failure of a request that was already in flight does not stretch the backoff.
    assert _record(ep, broken, config, 1) is health.Change.NONE
    assert not ep.trial_ready(1.9)
    assert ep.trial_ready(2.0)
    # A trial that failed as its own request may have made it fail decides nothing: one team must
    # not keep a shared endpoint out. The next request is the next trial.
    assert _record(ep, _fail("a"), config, 2.0, trial=True) is health.Change.NONE
    assert (ep.ejected_until, ep.trial_ready(2.0)) == (2, True)
    # A trial the endpoint failed: the next backoff.
    assert _record(ep, broken, config, 2.0, trial=True) is health.Change.EJECTED
    assert ep.ejected_until == 2.0 + 4
    assert _record(ep, broken, config, 6.0, trial=True) is health.Change.EJECTED
    assert ep.ejected_until == 6.0 + 5  # capped
    ep.probe_ok = False
    assert not ep.trial_ready(100)  # a failing probe holds the trial back
    ep.probe_ok = True
    assert _record(ep, health.SERVED, config, trial=True) is health.Change.READMITTED
    assert (ep.state, ep.ejections, ep.usable) == (EndpointState.HEALTHY, 0, True)
    assert health.backoff(config, 1) == 2


def test_one_teams_failed_requests_make_an_endpoint_suspect_once_and_a_second_team_ejects() -> None:
    config = HealthConfig(failures_to_eject=2)
    ep = Endpoint("http://e")
    changes = [_record(ep, _fail("a"), config) for _ in range(4)]
    assert changes == [health.Change.NONE, health.Change.SUSPECT, health.Change.NONE, health.Change.NONE]
    assert ep.usable
    assert _record(ep, _fail("b"), config) is health.Change.EJECTED
    assert not ep.usable


def test_a_success_forgets_the_teams_and_an_endpoint_failure_in_the_run_ejects() -> None:
    config = HealthConfig(failures_to_eject=2)
    ep = Endpoint("http://e")
    _record(ep, _fail("a"), config)
    _record(ep, health.NO_VERDICT, config)  # the client left: says nothing, changes nothing
    _record(ep, health.SERVED, config)
    assert _record(ep, _fail("b"), config) is health.Change.NONE
    assert _record(ep, _fail("b"), config) is health.Change.SUSPECT  # team a's failure is forgotten
    fresh = Endpoint("http://f")
    _record(fresh, _fail("a"), config)
    assert _record(fresh, health.ENDPOINT_FAILED, config) is health.Change.EJECTED


def test_teams_to_eject_is_a_whole_positive_health_setting() -> None:
    def health_of(raw: object) -> HealthConfig:
        return parse_model({"name": "m", "endpoints": [{"url": "http://w:1"}], "health": raw}, "m").health

    assert health_of({}).teams_to_eject == 2
    assert health_of({"teams_to_eject": 1}).teams_to_eject == 1
    for bad in (0, 1.5, "two"):
        with pytest.raises(ConfigError, match=r"m\.health\.teams_to_eject"):
            health_of({"teams_to_eject": bad})


def test_parse_load_sums_label_sets_and_ignores_everything_else() -> None:
    text = """# HELP vllm:num_requests_running Number of requests.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 2.0
vllm:num_requests_running{engine="1",model_name="m"} 1.0
vllm:num_requests_waiting{engine="0",model_name="m"} 4.0
vllm:num_requests_waiting_by_reason{reason="x"} 99
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25
vllm:prompt_tokens_total{model_name="m"} 12345
python_gc_objects_collected_total{generation="0"} 1.0
"""
    assert parse_load(text) == Load(running=3, waiting=4, kv_cache_usage=0.25)
    assert parse_load("vllm:num_requests_running 1\n") == Load(1, 0, 0)
    assert parse_load("up 1\n") is None
    assert parse_load('vllm:num_requests_running{model_name="m"} NaN\n') is None


def _pool(clock: list[float], max_inflight: int = 1) -> Pool:
    model = ModelConfig(
        name="m",
        endpoints=("http://a", "http://b"),
        routing=RoutingConfig(max_inflight_per_endpoint=max_inflight, max_queue=2, max_queue_wait=5),
    )
    return Pool(model, model.pool_configs()[0], Metrics(), rng=random.Random(0), clock=lambda: clock[0])


def test_a_pool_hands_freed_slots_to_waiters_in_order_and_refuses_past_its_queue() -> None:
    async def scenario() -> None:
        pool = _pool([0.0])
        a = pool.try_acquire(REQ, pool._rng)
        b = pool.try_acquire(REQ, pool._rng)
        assert a is not None
        assert b is not None
        assert pool.try_acquire(REQ, pool._rng) is None  # both full: wait
        first = asyncio.ensure_future(pool.acquire(RouteRequest("m", team="x"), pool._rng, (), 5))
        second = asyncio.ensure_future(pool.acquire(RouteRequest("m", team="y"), pool._rng, (), 5))
        await asyncio.sleep(0)
        with pytest.raises(GatewayError) as full:
            await pool.acquire(REQ, pool._rng, (), 5)
        assert full.value.code.wire_code == "pool_saturated"
        pool.release(a[0])
        assert (await first)[0] is a[0]
        assert a[0].inflight == 1
        # A newcomer may not take a slot while someone waits, even one that just freed.
        pool.release(b[0])
        assert pool.try_acquire(REQ, pool._rng) is None or not pool.queue
        assert (await second)[0] is b[0]

    asyncio.run(scenario())


def test_a_pool_with_only_ejected_endpoints_is_unavailable_until_the_trial() -> None:
    clock = [0.0]
    pool = _pool(clock, max_inflight=10)
    for ep in pool.endpoints:
        for _ in range(3):
            pool.report(ep, health.ENDPOINT_FAILED, trial=False)
    with pytest.raises(PoolUnavailable):
        pool.try_acquire(REQ, pool._rng)
    clock[0] = 2.5
    trial = pool.try_acquire(REQ, pool._rng)
    assert trial is not None
    assert trial[1] is True
    pool.report(trial[0], health.SERVED, trial=True)
    pool.release(trial[0])
    assert trial[0].usable
    other = pool.try_acquire(REQ, pool._rng)  # the other one's trial comes first
    assert other is not None
    assert other[1] is True
    assert other[0] is not trial[0]
    got = pool.try_acquire(REQ, pool._rng)
    assert got is not None
    assert got == (trial[0], False)
