"""Sign-ins, sign-outs and failed sign-ins in the audit log (gateway/admin/audit.py), with who and
why, never a token or a code.

    console.signed_in            actor: who; changes {"via": [null, "oidc" | "admin-token"]}
    console.signed_out           actor: who
    console.signin_failed        actor: the person when the IdP proved who they are, else
                                 anonymous; changes {"reason": [null, why]}
    console.signin_failures_dropped   changes {"dropped": [null, how many]}: failures past the
                                 bounds below, written once their minute is over

Anyone can make a sign-in fail (a made-up callback), and the audit log is a bounded stream:
unbounded failure entries would push real changes out of it, and one shared budget would let a
flood silence everyone else's failures. So each address gets at most PER_ADDRESS a minute for each
kind of reason (about ten: the words an IdP or a client chose are not part of the kind), this
replica at most PER_REPLICA a minute; what is dropped is counted into one entry. A wrong admin
token is always written: the admin-token throttle (gateway/admin/throttle.py) already bounds those
per address, and they matter most.
"""

from __future__ import annotations

import logging
import re
import time
from collections import OrderedDict
from collections.abc import Callable

from gateway.admin.deps import AdminDeps
from gateway.identity.principal import ANONYMOUS, Principal

log = logging.getLogger("sluicegate.console")
PER_ADDRESS = 5
PER_REPLICA = 300
_MAX_ADDRESSES = 10_000


class SignInAudit:
    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._minute = 0
        self._written = 0
        self._by_address: OrderedDict[tuple[str, str], int] = OrderedDict()
        self.dropped = 0  # in the current minute, not yet written down

    async def signed_in(self, deps: AdminDeps, who: Principal, peer: str, *, via: str) -> None:
        await deps.audit.by(who.actor(), peer).write(
            "console.signed_in", team="", before={}, after={"via": via}
        )

    async def signed_out(self, deps: AdminDeps, who: Principal, peer: str) -> None:
        await deps.audit.by(who.actor(), peer).write("console.signed_out", team="", before={}, after={})

    async def failed(
        self, deps: AdminDeps, peer: str, reason: str, who: Principal = ANONYMOUS, *, always: bool = False
    ) -> None:
        await self._new_minute(deps, peer)
        key = (peer, _kind(reason))
        seen = self._by_address.pop(key, 0)
        self._by_address[key] = seen + 1
        while len(self._by_address) > _MAX_ADDRESSES:
            self._by_address.popitem(last=False)
        if not always and (seen >= PER_ADDRESS or self._written >= PER_REPLICA):
            self.dropped += 1
            log.warning("console sign-in failure not audited (over its bound): %s", reason)
            return
        self._written += 1
        await deps.audit.by(who.actor(), peer).write(
            "console.signin_failed", team="", before={}, after={"reason": reason}
        )

    async def _new_minute(self, deps: AdminDeps, peer: str) -> None:
        minute = int(self._clock() // 60)
        if minute == self._minute:
            return
        self._minute, self._written = minute, 0
        self._by_address.clear()
        dropped, self.dropped = self.dropped, 0
        if dropped:
            await deps.audit.by(ANONYMOUS.actor(), peer).write(
                "console.signin_failures_dropped", team="", before={}, after={"dropped": dropped}
            )


def _kind(reason: str) -> str:
    """A reason without what someone else chose in it: `identity provider said <word>` and
    `token endpoint answered <status> <word>` count as one kind each."""
    return re.split(r" said | answered |: ", reason, maxsplit=1)[0]
