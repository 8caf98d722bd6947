"""Deadline bench: how honest the estimate of a saturated pool's wait is, and what early refusal
does, in process (gateway/routing/deadline.py, the pool and its token queue; no Redis: one
replica's counters).

A pool of SLOTS slots; three teams send requests at random (Poisson) at `load` x the pool's
capacity; each request holds its slot for a random time (exponential, mean SERVICE_S, or fixed
with --fixed) and half or all of them carry a deadline drawn uniformly from 0.05 to 1 s (within a
team those go first: with half, the others make room for them). The slot is the first
token here (no prefill), so the queue wait is what the deadline is for. Per load it prints: the
estimate's error over the requests that queued and were served (actual - estimated wait; p50 and
p90 of its size, and its mean: negative means the estimate was too long), and, of the requests
with a deadline, how many were refused on arrival, refused while queued, served in time, or served
late (a miss: refused too late).

    .venv/bin/python bench/deadline_bench.py            # about a minute
    .venv/bin/python bench/deadline_bench.py --quick
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gateway.errors import ErrorCode, GatewayError
from gateway.model_table import ModelConfig, RoutingConfig
from gateway.observability.metrics import Metrics
from gateway.routing.policy import RouteRequest
from gateway.routing.pool import Pool
from gateway.routing.share import ShareTicket
from gateway.routing.tokenqueue import TokenQueue

SLOTS = 4
SERVICE_S = 0.02
TEAMS = ("a", "b", "c")


async def run(load: float, share: float, requests: int, *, fixed: bool, seed: int) -> str:
    routing = RoutingConfig(max_inflight_per_endpoint=SLOTS, max_queue=100_000, max_queue_wait=60)
    model = ModelConfig(name="bench", endpoints=("http://w",), routing=routing)
    pool = Pool(model, model.pool_configs()[0], Metrics(), rng=random.Random(seed))
    rng = random.Random(seed)
    errors: list[float] = []
    outcome: Counter[str] = Counter()

    async def one(team: str, deadline_s: float | None, service_s: float) -> None:
        arrived = time.monotonic()
        deadline = None if deadline_s is None else arrived + deadline_s
        ticket = ShareTicket(team, 1, 5, 1.0, deadline=deadline)
        route = RouteRequest("bench", team=team, share=ticket)
        got = pool.try_acquire(route, rng)
        estimate = None
        if got is None:
            # What acquire() estimates, in the same loop step (nothing moves in between).
            assert isinstance(pool.queue, TokenQueue)  # fairness: tokens, the default
            estimate = pool.deadlines.estimate(pool.queue.ahead(ticket))
            try:
                got = await pool.acquire(route, rng, (), 60)
            except GatewayError as error:
                if error.code is not ErrorCode.DEADLINE_UNREACHABLE:
                    raise
                early = estimate is not None and deadline is not None and arrived + estimate > deadline
                outcome["refused on arrival" if early else "refused queued"] += 1
                return
            if estimate is not None:
                errors.append(time.monotonic() - arrived - estimate)
        if deadline is not None:
            outcome["missed" if time.monotonic() > deadline else "in time"] += 1
        taken = time.monotonic()
        await asyncio.sleep(service_s)
        pool.release(got[0], time.monotonic() - taken)

    rate = load * SLOTS / SERVICE_S
    tasks = []
    for _ in range(requests):
        await asyncio.sleep(rng.expovariate(rate))
        deadline_s = rng.uniform(0.05, 1.0) if rng.random() < share else None
        service_s = SERVICE_S if fixed else rng.expovariate(1 / SERVICE_S)
        tasks.append(asyncio.create_task(one(rng.choice(TEAMS), deadline_s, service_s)))
    await asyncio.gather(*tasks)
    pool.close()
    sizes = sorted(abs(e) for e in errors) or [0.0]
    with_deadline = sum(outcome.values()) or 1
    shares = "  ".join(f"{name} {outcome[name] / with_deadline:5.1%}" for name in _OUTCOMES)
    p50, p90 = statistics.median(sizes) * 1e3, sizes[int(len(sizes) * 0.9)] * 1e3
    mean = statistics.fmean(errors or [0]) * 1e3
    return (
        f"load {load:4.2f}, {share:4.0%} with a deadline: {len(errors):5d} queued and served, "
        f"estimate error p50 {p50:6.1f} ms  p90 {p90:6.1f} ms  mean {mean:+7.1f} ms"
        f"\n    of the {with_deadline} with a deadline: {shares}"
    )


_OUTCOMES = ("refused on arrival", "refused queued", "in time", "missed")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--fixed", action="store_true", help="every request holds its slot SERVICE_S")
    args = parser.parse_args()
    requests = 1000 if args.quick else 4000
    kind = "fixed" if args.fixed else "exponential"
    print(
        f"deadline bench: {SLOTS} slots, {kind} service of mean {SERVICE_S * 1e3:.0f} ms, {requests} requests"
    )
    for load, share in ((0.7, 0.5), (0.95, 0.5), (1.3, 0.5), (0.95, 1.0), (1.3, 1.0), (2.0, 1.0)):
        print(asyncio.run(run(load, share, requests, fixed=args.fixed, seed=7)))


if __name__ == "__main__":
    main()
