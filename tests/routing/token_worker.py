"""A worker that writes down, in the order they reach it, whose requests it serves and how many
tokens each is, for fair-share tests and bench/fair_share_bench.py.

The request's `user` field says who sent it ("<team>|<replica>"); its prompt is `len(content) // 4`
tokens and it generates exactly `max_tokens`, and reports that usage. `held` keeps every request
waiting at the worker until it is cleared (so a test can queue everything first);
`x-worker-fail-status: 503` answers a request with that status instead;
`seconds_per_token` makes service take time proportional to its tokens (the bench only).

`while_backlogged()` reads the record: the dispatches up to the moment the first (team, replica)
sent its last request, during which every team was backlogged on every replica.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

W_OUT = 2  # gateway.routing.share.W_OUT: the tests' weighted service is the gateway's


@dataclass(frozen=True, slots=True)
class Served:
    team: str
    replica: str
    prompt_tokens: int
    completion_tokens: int
    started: float
    seconds: float

    @property
    def cost(self) -> float:
        return self.prompt_tokens + W_OUT * self.completion_tokens


@dataclass
class TokenWorker:
    seconds_per_token: float = 0.0
    held: bool = False
    served: list[Served] = field(default_factory=list)
    failed: int = 0

    def app(self) -> Starlette:
        return Starlette(
            routes=[
                Route("/v1/chat/completions", self.chat, methods=["POST"]),
                Route("/health", self.health, methods=["GET"]),
            ]
        )

    async def health(self, request: Request) -> Response:
        return Response(b"{}", media_type="application/json")

    async def chat(self, request: Request) -> Response:
        body: dict[str, Any] = orjson.loads(await request.body())
        team, _, replica = str(body.get("user", "")).partition("|")
        prompt = len(str(body["messages"][-1]["content"])) // 4
        completion = int(body.get("max_tokens") or 1)
        fail = request.headers.get("x-worker-fail-status")
        if fail is not None:  # as tests/routing/worker.py: this request fails so
            self.failed += 1
            return Response(b'{"error": {"message": "injected"}}', int(fail), media_type="application/json")
        while self.held:  # noqa: ASYNC110  # flipped from the test's thread, not this loop
            await asyncio.sleep(0.01)
        started = time.perf_counter()
        seconds = (prompt + W_OUT * completion) * self.seconds_per_token
        self.served.append(Served(team, replica, prompt, completion, started, seconds))
        if seconds:
            await asyncio.sleep(seconds)
        answer = {
            "id": f"c-{len(self.served)}",
            "object": "chat.completion",
            "created": 0,
            "model": body.get("model"),
            "choices": [
                {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}
            ],
            "usage": {
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "total_tokens": prompt + completion,
            },
        }
        return Response(orjson.dumps(answer), media_type="application/json")


@dataclass(frozen=True)
class Backlogged:
    """Weighted service per team while every team was backlogged everywhere."""

    service: dict[str, float]  # (tokens / weight)
    shares: dict[str, float]  # of the tokens served (unweighted)
    max_gap: float  # the largest difference of two teams' weighted service along the way
    dispatches: int


def while_backlogged(
    served: list[Served], sent: dict[tuple[str, str], int], weights: dict[str, int], *, skip: int = 0
) -> Backlogged:
    """`sent`: requests sent per (team, replica). `skip`: the first dispatches, made before every
    team was waiting (the slots taken while the requests were being sent), are not counted."""
    left = dict(sent)
    for record in served[:skip]:
        left[(record.team, record.replica)] -= 1
    service = dict.fromkeys(weights, 0.0)
    tokens = dict.fromkeys(weights, 0.0)
    max_gap = 0.0
    count = 0
    for record in served[skip:]:
        left[(record.team, record.replica)] -= 1
        service[record.team] += record.cost / weights[record.team]
        tokens[record.team] += record.cost
        count += 1
        max_gap = max(max_gap, max(service.values()) - min(service.values()))
        if not left[(record.team, record.replica)]:
            break  # this team is no longer backlogged on this replica
    total = sum(tokens.values()) or 1.0
    return Backlogged(service, {t: v / total for t, v in tokens.items()}, max_gap, count)


@dataclass(frozen=True)
class TeamLoad:
    key: str
    weight: int
    per_replica: int  # requests sent to each replica
    prompt_tokens: int
    max_tokens: int


def pool_yaml(worker_url: str, fairness: str, *, slots: int = 1) -> str:
    """One model `m` in front of the worker: `slots` requests in flight per replica, a deep queue."""
    return (
        f"models:\n  - name: m\n    endpoints: [{{url: '{worker_url}'}}]\n"
        f"    routing: {{max_inflight_per_endpoint: {slots}, max_queue: 5000, max_queue_wait: 300, "
        f"fairness: {fairness}}}\n    timeouts: {{total: 300, first_token: 300}}\n"
    )


async def queue_depth(session: Any, url: str) -> float:
    async with session.get(f"{url}/metrics") as reply:
        text = await reply.text()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith('sluicegate_pool_queue_depth{pool="m"}')
    )


async def backlog_everywhere(
    replicas: list[str],
    teams: dict[str, TeamLoad],
    worker: TokenWorker,
    *,
    slots: int = 1,
    within_s: float = 120,
) -> dict[tuple[str, str], int]:
    """Sends every team's requests to every replica while the worker holds them, waits until each
    replica has queued all but its `slots` in flight, lets the worker go and waits for every
    answer (each must be a 200). Returns the requests sent per (team, replica index)."""
    import aiohttp  # the tests' and the bench's client; imported here so the worker needs only Starlette

    worker.held = True
    sent: dict[tuple[str, str], int] = {}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:

        async def one(url: str, replica: str, team: str, load: TeamLoad) -> int:
            body = {
                "model": "m",
                "user": f"{team}|{replica}",
                "max_tokens": load.max_tokens,
                "messages": [{"role": "user", "content": "x" * (4 * load.prompt_tokens)}],
            }
            headers = {"authorization": f"Bearer {load.key}"}
            async with session.post(f"{url}/v1/chat/completions", json=body, headers=headers) as reply:
                await reply.read()
                return reply.status

        tasks = []
        for index, url in enumerate(replicas):
            for team, load in teams.items():
                sent[(team, str(index))] = load.per_replica
                tasks += [
                    asyncio.ensure_future(one(url, str(index), team, load)) for _ in range(load.per_replica)
                ]
        per_replica = sum(load.per_replica for load in teams.values())
        deadline = asyncio.get_running_loop().time() + within_s
        try:
            for url in replicas:
                while await queue_depth(session, url) < per_replica - slots:
                    if asyncio.get_running_loop().time() > deadline:
                        raise AssertionError(f"{url} did not queue {per_replica - slots} requests")
                    await asyncio.sleep(0.05)
        finally:
            worker.held = False
        statuses = await asyncio.gather(*tasks)
    assert set(statuses) == {200}, sorted(set(statuses))
    return sent
