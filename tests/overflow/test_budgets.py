"""Two replicas on one real Redis: a team's money budget holds across its pool's answers and its
overflow provider's, each priced at its own rates, with requests racing on both replicas."""

from __future__ import annotations

import concurrent.futures
import json
from decimal import Decimal
from typing import Any

import openai
import pytest

from tests.conftest import GatewayFactory
from tests.http import get
from tests.overflow.conftest import allowed_team, chat, overflow_table
from tests.overflow.provider import Provider
from tests.servers import free_port
from tests.waiting import wait_until

BUDGET = Decimal("0.002")


def test_a_money_budget_holds_across_pool_and_overflow(
    make_gateway: GatewayFactory, fake_worker: str, provider: Provider
) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    with (
        make_gateway(overflow_table(fake_worker, provider)) as one,
        make_gateway(overflow_table(dead, provider, health={"probe_interval": 0.1})) as two,
    ):

        def down() -> bool:
            return '"healthy_endpoints": 0' in json.dumps(two.admin.call("GET", "/admin/v1/models"))

        wait_until(down, 10, "replica two's pool to be down")
        team = allowed_team(one, daily_cost=str(BUDGET))
        key = one.new_key(team)["key"]

        def send(i: int) -> tuple[str, str | None]:
            gw = (one, two)[i % 2]
            try:
                raw = chat(gw, key, max_tokens=8)
            except openai.APIStatusError as exc:
                return "refused", str(exc.body["code"])  # type: ignore[index]
            return "served", raw.headers.get("x-sluicegate-served-by")

        with concurrent.futures.ThreadPoolExecutor(max_workers=6) as pool:
            results = list(pool.map(send, range(60)))
        served = [by for outcome, by in results if outcome == "served"]
        refusals = {code for outcome, code in results if outcome == "refused"}
        assert "overflow:cloud" in served
        assert None in served  # replica one's pool answered some
        assert "insufficient_quota" in refusals  # the budget ran out, on both replicas' count

        rows: list[dict[str, Any]] = []

        def metered() -> bool:
            rows[:] = one.usage(team)
            return sum(int(r["requests"]) for r in rows) >= len(served)

        wait_until(metered, 10, "every answer to be metered")
        spent = sum((Decimal(r["cost"]) for r in rows), Decimal(0))
        assert spent <= BUDGET
        by_who = {r["served_by"] for r in rows if int(r["requests"])}
        assert by_who == {None, "overflow:cloud"}
        metrics = get(f"{two.url}/metrics").body.decode()
        labels = f'outcome="served",provider="fake-model/cloud",team="{team}"'
        series = f"sluicegate_overflow_requests_total{{{labels}}}"
        assert series in metrics


def test_a_request_that_may_overflow_reserves_at_the_higher_price(
    make_gateway: GatewayFactory, fake_worker: str, provider: Provider
) -> None:
    """A budget the pool's price fits but the provider's does not: the team that allows overflow
    is refused at admission (it might have been served at the provider's price); the one that
    does not is served by its pool, at the pool's price."""
    with make_gateway(overflow_table(fake_worker, provider)) as gw:
        budget = "0.00005"  # 8 tokens of output alone cost 0.00012 at the provider, 0.0000064 here
        allowed = gw.new_key(allowed_team(gw, daily_cost=budget))["key"]
        denied_team = gw.new_team()
        gw.admin.call("PATCH", f"/admin/v1/teams/{denied_team}", {"daily_cost": budget})
        denied = gw.new_key(denied_team)["key"]
        with pytest.raises(openai.APIStatusError) as raised:
            chat(gw, allowed, max_tokens=8)
        assert (raised.value.status_code, raised.value.body["code"]) == (429, "insufficient_quota")  # type: ignore[index]
        assert chat(gw, denied, max_tokens=8).headers.get("x-sluicegate-served-by") is None
