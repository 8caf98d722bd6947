"""Sign-ins, sign-outs and failed sign-ins in the audit log (gateway/admin/audit.py), with who and
why, never a token or a code.

    console.signed_in       actor: who; changes {"via": [null, "oidc" | "admin-token"]}
    console.signed_out      actor: who
    console.signin_failed   actor: the person when the IdP proved who they are, else anonymous;
                            changes {"reason": [null, why]}

Anyone can make a sign-in fail (a made-up callback, a wrong token), and the audit log is a bounded
stream: unbounded failure entries would push real changes out of it. So this replica writes at
most MAX_FAILURES_PER_MINUTE failure entries a minute; past that it logs how many it dropped.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable

from gateway.admin.deps import AdminDeps
from gateway.identity.principal import ANONYMOUS, Principal

log = logging.getLogger("sluicegate.console")
MAX_FAILURES_PER_MINUTE = 30


class SignInAudit:
    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._failures: deque[float] = deque()
        self.dropped = 0

    async def signed_in(self, deps: AdminDeps, who: Principal, peer: str, *, via: str) -> None:
        await deps.audit.by(who.actor(), peer).write(
            "console.signed_in", team="", before={}, after={"via": via}
        )

    async def signed_out(self, deps: AdminDeps, who: Principal, peer: str) -> None:
        await deps.audit.by(who.actor(), peer).write("console.signed_out", team="", before={}, after={})

    async def failed(self, deps: AdminDeps, peer: str, reason: str, who: Principal = ANONYMOUS) -> None:
        now = self._clock()
        while self._failures and now - self._failures[0] >= 60:
            self._failures.popleft()
        if len(self._failures) >= MAX_FAILURES_PER_MINUTE:
            self.dropped += 1
            log.warning(
                "console sign-in failure not audited (over %d a minute): %s", MAX_FAILURES_PER_MINUTE, reason
            )
            return
        self._failures.append(now)
        await deps.audit.by(who.actor(), peer).write(
            "console.signin_failed", team="", before={}, after={"reason": reason}
        )
