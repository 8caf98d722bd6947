"""LimitPlans: the limits a request must pass, kept per key, equal to plans.plan's every time."""

from __future__ import annotations

import dataclasses
import datetime as dt

from gateway.limits.admission import LimitKind
from gateway.limits.plans import LimitPlans, plan
from gateway.limits.spec import LimitSet, TokenCount

KEY = LimitSet(rpm=10, tpm=1000, max_concurrency=2, daily_tokens=5000, per_model={"m": LimitSet(rpm=3)})
TEAM = LimitSet(rpm=100, monthly_tokens=90_000, tpm_counts=TokenCount.INPUT)
NOON = dt.datetime(2026, 3, 14, 12, 0, tzinfo=dt.UTC)


def test_a_kept_plan_is_the_plan_and_its_fixed_limits_are_kept() -> None:
    plans = LimitPlans()
    first = plans.plan("t", TEAM, "k1", KEY, "m", NOON)
    assert first == plan("t", TEAM, "k1", KEY, "m", NOON)
    again = plans.plan("t", TEAM, "k1", KEY, "m", NOON)
    assert again == first
    # The rate and concurrency limits are the very objects of the first plan: built once.
    fixed = [limit for limit in first if limit.kind is not LimitKind.BUDGET]
    assert all(a is b for a, b in zip(fixed, again, strict=False))


def test_budgets_follow_the_clock() -> None:
    plans = LimitPlans()
    plans.plan("t", TEAM, "k1", KEY, "m", NOON)
    later = NOON + dt.timedelta(hours=6)
    assert plans.plan("t", TEAM, "k1", KEY, "m", later) == plan("t", TEAM, "k1", KEY, "m", later)


def test_changed_limits_and_other_keys_and_models_get_their_own_plan() -> None:
    plans = LimitPlans()
    plans.plan("t", TEAM, "k1", KEY, "m", NOON)
    raised = dataclasses.replace(KEY, rpm=20)
    planned = plans.plan("t", TEAM, "k1", raised, "m", NOON)
    assert planned == plan("t", TEAM, "k1", raised, "m", NOON)
    team = dataclasses.replace(TEAM, rpm=None)
    planned = plans.plan("t", team, "k1", raised, "m", NOON)
    assert planned == plan("t", team, "k1", raised, "m", NOON)
    for key_id, model in (("k2", "m"), ("k1", "other")):
        got = plans.plan("t", team, key_id, raised, model, NOON)
        assert got == plan("t", team, key_id, raised, model, NOON)
    # An equal set read again (a key record refreshed) is the same plan.
    copy = dataclasses.replace(raised)
    assert plans.plan("t", team, "k1", copy, "m", NOON) == plan("t", team, "k1", raised, "m", NOON)
