"""This process's own exhaustion, told apart from a peer's failure.

A connect that fails for want of a descriptor (EMFILE, ENFILE), of kernel memory (ENOBUFS,
ENOMEM) or of a local port (EADDRNOTAVAIL) says nothing about the peer it was for: judging the
worker by it would eject a healthy worker for the gateway's own load (and every worker at once).
"""

from __future__ import annotations

import errno

LOCAL_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM, errno.EADDRNOTAVAIL})


def is_local_exhaustion(exc: BaseException) -> bool:
    """`exc`, or what it wraps (aiohttp's connector errors carry the OSError as `os_error`, and
    asyncio's as the cause), is one of this process's own resource failures."""
    seen: BaseException | None = exc
    for _ in range(4):  # a wrapper of a wrapper at most; never a loop on a cyclic chain
        if seen is None:
            return False
        if isinstance(seen, OSError) and seen.errno in LOCAL_ERRNOS:
            return True
        wrapped = getattr(seen, "os_error", None)
        seen = wrapped if isinstance(wrapped, BaseException) else (seen.__cause__ or seen.__context__)
    return False
