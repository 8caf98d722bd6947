"""The trusted proxies (Settings.trusted_proxies), parsed once: who may speak for a client in
`X-Forwarded-For` (gateway.proxy.forwarding, the admin API's and the console's throttles)."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

Networks = tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]


def trusted_networks(entries: Iterable[str]) -> Networks:
    """Settings.trusted_proxies, parsed once (the settings already checked each entry)."""
    return tuple(ipaddress.ip_network(entry, strict=False) for entry in entries)
