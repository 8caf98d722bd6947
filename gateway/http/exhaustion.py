"""This process's own exhaustion, told apart from a peer's failure.

A connect that fails for want of a descriptor (EMFILE, ENFILE), of kernel memory (ENOBUFS,
ENOMEM) or of a local port (EADDRNOTAVAIL) says nothing about the peer it was for: judging the
worker by it would eject a healthy worker for the gateway's own load (and every worker at once).
The worker client (gateway/worker/client.py) raises `LocalExhaustion` for these.
"""

from __future__ import annotations

import errno

LOCAL_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM, errno.EADDRNOTAVAIL})
