"""Redis paused (SIGSTOP: connections stay open, nothing answers) and Redis killed and restarted
on the same port, under a steady load of real SDK clients through a real gateway process.

What must hold: no request waits past the gateway's Redis timeout (plus a margin); every answer is
a 200 or a clean 503 `redis_unavailable` (keys with a rate limit need Redis to be admitted: fail
closed); keys without limits keep getting 200s (auth cached, metering written behind); the gateway
stays up; and once Redis is back, the metered usage equals what the worker reported to the clients
on every 200, neither lost nor counted twice.
"""

from __future__ import annotations

import os
import secrets
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from gateway.dev.embedded_redis import EmbeddedRedis
from tests.faults.conftest import REDIS_TIMEOUT_S, GatewayProcess, StartGateway
from tests.faults.load import Client, Outcome, run_load, warm_up
from tests.waiting import wait_until

FAULT_AT_S = 2.0
AFTER_FAULT_S = 3.0  # load goes on this long after the fault is lifted
MARGIN_S = 2.0


@dataclass(frozen=True)
class Window:
    """time.monotonic() of: the fault, the start of its lifting, Redis answering again."""

    fault: float
    lifting: float
    lifted: float


def _under_fault(
    start_gateway: StartGateway,
    redis: EmbeddedRedis,
    begin: Callable[[], object],
    end: Callable[[], object],
    *,
    restarts: bool,
    fault_s: float,
) -> None:
    gw = start_gateway(redis.url)
    team = "faults-" + secrets.token_hex(4)
    gw.admin.call("POST", "/admin/v1/teams", {"name": team})
    limited = gw.new_key(team, rpm=1_000_000)  # never refuses: only Redis being away can
    unlimited = gw.new_key(team)
    clients = [
        Client(key["id"], key["key"], stream) for key in (limited, unlimited) for stream in (False, True)
    ]
    warm = warm_up(gw.url, clients, timeout_s=10)
    assert all(o.status == 200 for o in warm), warm
    marks: list[float] = []

    def fault() -> None:
        time.sleep(FAULT_AT_S)
        marks.append(time.monotonic())
        begin()
        time.sleep(fault_s)
        marks.append(time.monotonic())
        end()
        marks.append(time.monotonic())

    injector = threading.Thread(target=fault, daemon=True)
    injector.start()
    load_s = FAULT_AT_S + fault_s + AFTER_FAULT_S
    outcomes = warm + run_load(gw.url, clients, load_s, timeout_s=REDIS_TIMEOUT_S + 10)
    injector.join(10)
    assert len(marks) == 3, "the fault was not injected and lifted"
    window = Window(*marks)
    _check_answers(gw, outcomes, limited["id"], unlimited["id"], window, restarts=restarts)
    _check_usage(gw, team, outcomes)


def _check_answers(
    gw: GatewayProcess,
    outcomes: list[Outcome],
    limited: str,
    unlimited: str,
    window: Window,
    *,
    restarts: bool,
) -> None:
    summary = Counter((o.key_id == limited, o.status, o.code) for o in outcomes)
    slowest = max(o.seconds for o in outcomes)
    print(f"\noutcomes (limited key?, status, code): {dict(summary)}; slowest {slowest:.2f} s")
    assert gw.alive(), gw.log()
    late = [o for o in outcomes if o.seconds > REDIS_TIMEOUT_S + MARGIN_S]
    assert not late, f"requests waited past the Redis timeout: {late[:3]}"
    unclean = [o for o in outcomes if (o.status, o.code) not in ((200, None), (503, "redis_unavailable"))]
    assert not unclean, f"neither a 200 nor a clean 503: {unclean[:3]}"
    lost = [o for o in outcomes if o.key_id == unlimited and o.status != 200]
    assert not lost, (
        "a key without limits lost answers (started, seconds; from the fault on): "
        f"{[(round(o.started - window.fault, 3), round(o.seconds, 3)) for o in lost[:5]]}, "
        f"Redis back from {window.lifting - window.fault:.3f} to {window.lifted - window.fault:.3f} s"
    )
    during = [
        o
        for o in outcomes
        if o.key_id == limited and window.fault + 0.2 < o.started < window.lifting - REDIS_TIMEOUT_S - 0.2
    ]
    assert during, "no request of the limited key ran during the fault"
    assert all(o.status == 503 for o in during), "admission did not fail closed"
    after = [o for o in outcomes if o.key_id == limited and o.started > window.lifted + 1.5]
    assert after, "no request of the limited key ran after the fault"
    assert all(o.status == 200 for o in after), "admission did not recover"


def _check_usage(gw: GatewayProcess, team: str, outcomes: list[Outcome]) -> None:
    wait_until(lambda: gw.metric("sluicegate_metering_pending") == 0, 15, "the meter's queue to drain")
    served: dict[str, Counter[str]] = {}
    for o in outcomes:
        if o.status == 200:
            totals = served.setdefault(o.key_id, Counter())
            totals.update(requests=1, prompt_tokens=o.prompt_tokens, completion_tokens=o.completion_tokens)
    metered: dict[str, Counter[str]] = {}
    for row in gw.usage(team):
        totals = metered.setdefault(row["key_id"], Counter())
        for name in ("requests", "prompt_tokens", "completion_tokens", "errors", "disconnects"):
            totals[name] += row[name]
    for totals in metered.values():
        assert totals.pop("errors") == totals.pop("disconnects") == 0
    assert metered == served


def test_redis_paused(start_gateway: StartGateway, own_redis: EmbeddedRedis) -> None:
    _under_fault(
        start_gateway,
        own_redis,
        begin=lambda: os.kill(own_redis.pid, signal.SIGSTOP),
        end=lambda: os.kill(own_redis.pid, signal.SIGCONT),
        restarts=False,
        fault_s=10.0,
    )


def test_redis_killed_and_restarted_on_the_same_port(
    start_gateway: StartGateway, own_redis: EmbeddedRedis
) -> None:
    def kill() -> None:
        os.kill(own_redis.pid, signal.SIGKILL)
        own_redis.stop()

    _under_fault(start_gateway, own_redis, begin=kill, end=own_redis.start, restarts=True, fault_s=3.0)
