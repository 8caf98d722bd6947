"""Failed sign-ins in the audit log are bounded per address and kind and per replica, so a flood
can neither push real changes out of the log nor silence other addresses' failures; a wrong admin
token is always written; what is dropped is counted into one entry. The clock is the test's."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from gateway.console.signin_audit import PER_ADDRESS, PER_REPLICA, SignInAudit


@dataclass
class _Journal:
    entries: list[tuple[str, dict[str, Any]]]
    actor: Any

    async def write(self, action: str, *, team: str, before: Any, after: dict[str, Any]) -> None:
        self.entries.append((action, after))


@dataclass
class _Audit:
    entries: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def by(self, actor: Any, peer: str) -> _Journal:
        return _Journal(self.entries, actor)


@dataclass
class _Deps:
    audit: _Audit = field(default_factory=_Audit)


def test_a_flood_from_one_address_silences_only_itself_and_is_counted() -> None:
    now = [0.0]
    audit, deps = SignInAudit(clock=lambda: now[0]), _Deps()

    async def run() -> None:
        for word in ("a", "b", "c", "d", "e", "f", "g", "h"):  # words an attacker varies: one kind
            await audit.failed(deps, "203.0.113.9", f"identity provider said {word}")  # type: ignore[arg-type]
        await audit.failed(deps, "198.51.100.1", "identity provider said access_denied")  # type: ignore[arg-type]
        for _ in range(3):
            await audit.failed(deps, "203.0.113.9", "wrong admin token", always=True)  # type: ignore[arg-type]
        now[0] = 61.0
        await audit.failed(deps, "198.51.100.1", "unknown or used state")  # type: ignore[arg-type]

    asyncio.run(run())
    actions = [a for a, _ in deps.audit.entries]
    assert actions.count("console.signin_failed") == PER_ADDRESS + 1 + 3 + 1
    dropped = [after for action, after in deps.audit.entries if action == "console.signin_failures_dropped"]
    assert dropped == [{"dropped": 8 - PER_ADDRESS}]


def test_the_replica_bound_holds_across_addresses() -> None:
    audit, deps = SignInAudit(clock=lambda: 0.0), _Deps()

    async def run() -> None:
        for i in range(PER_REPLICA + 50):
            await audit.failed(deps, f"10.0.{i // 250}.{i % 250}", "no valid state")  # type: ignore[arg-type]

    asyncio.run(run())
    assert len(deps.audit.entries) == PER_REPLICA
    assert audit.dropped == 50
