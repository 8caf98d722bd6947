"""Jain's fairness index over the service the teams got lately: what
`sluicegate_fair_share_jain_index` reports for a pool (gateway/routing/vtc.py)."""

from __future__ import annotations

import collections
from collections.abc import Collection


class ServiceWindow:
    """The weighted service of the last `size` settled requests, by team."""

    def __init__(self, size: int) -> None:
        self._served: collections.deque[tuple[str, float]] = collections.deque(maxlen=size)

    def add(self, team: str, weighted: float) -> None:
        self._served.append((team, weighted))

    def jain_index(self, teams: Collection[str]) -> float:
        """(sum x)^2 / (n * sum x^2) over what each of `teams` got in the window: 1 is an even
        split by weight, 1/n one team taking it all. 1 for fewer than two teams."""
        if len(teams) < 2:
            return 1.0
        got = dict.fromkeys(teams, 0.0)
        for team, weighted in self._served:
            if team in got:
                got[team] += weighted
        total, squares = sum(got.values()), sum(x * x for x in got.values())
        return 1.0 if squares == 0 else total * total / (len(got) * squares)
