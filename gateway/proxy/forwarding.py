"""The headers a worker gets: the client's, minus what is not the worker's business, plus the
gateway's own request ids and forwarding headers.

Stripped: the client's credentials (a worker, or whoever registered its endpoint, must never see
a Sluicegate key), hop-by-hop headers (RFC 9110 §7.6.1, including any the client names in
`Connection:`), headers that describe the client's own connection or body (the gateway's request
to the worker has its own), and every client-written claim about where the request came from
(`Forwarded`, `X-Forwarded-*`, `X-Real-IP`), and what each client API declares its own (its
credential headers, and protocol headers such as `anthropic-version`: the gateway speaks that API
itself, and a worker behind the OpenAI contract must not read them as its own).
The gateway then says itself who the client is:
`X-Forwarded-For` is the peer's address, extended (not replaced) only when that peer is a
configured trusted proxy, whose own `X-Forwarded-For`/`X-Forwarded-Proto` are then believed.
Everything else (`OpenAI-Organization`, `baggage`, …) reaches the worker unchanged. The
client's `traceparent`/`tracestate` never do: with tracing on, each worker attempt gets its own
`traceparent`, naming the gateway's span for that attempt (gateway/proxy/upstream.py); with
tracing off the gateway has no span to name, and a client's header would make the worker's spans
children of whatever span the client chose, in a trace the operator's backend would show.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

from starlette.types import Scope

from gateway.http.context import RequestContext
from gateway.http.networks import Networks

# The client's own request id reaches the worker under this name; the worker's x-request-id is
# the gateway's, unique per request, so two requests can never collide there.
CLIENT_REQUEST_ID_HEADER = "x-client-request-id"

_NOT_FORWARDED = frozenset(
    {
        # credentials HTTP itself defines, and Azure's; each client API adds the headers it takes a
        # key in, and its protocol headers (gateway.apis: its `never_forward`)
        b"authorization",
        b"api-key",
        b"proxy-authorization",
        b"cookie",
        # hop-by-hop, and the client's connection and body
        b"host",
        b"content-length",
        b"content-type",
        b"content-encoding",
        b"transfer-encoding",
        b"connection",
        b"keep-alive",
        b"proxy-connection",
        b"te",
        b"trailer",
        b"upgrade",
        b"expect",
        b"accept-encoding",
        # identity the client could forge; the gateway writes its own
        b"forwarded",
        b"x-forwarded-for",
        b"x-forwarded-proto",
        b"x-forwarded-host",
        b"x-forwarded-port",
        b"x-real-ip",
        # ids: the gateway's own go out under these names
        b"x-request-id",
        b"x-client-request-id",
        # trace context: only the gateway's own span's (gateway.observability.tracing)
        b"traceparent",
        b"tracestate",
    }
)


class Forwarding:
    """Builds a worker's request headers; one per gateway, holding the trusted proxies."""

    __slots__ = ("_not_forwarded", "_trusted")

    def __init__(self, trusted: Networks = (), never_forward: Iterable[str] = ()) -> None:
        """`never_forward`: the client APIs' own headers a worker must not get (their credential
        headers, their protocol headers), declared by each API (gateway.apis) and handed down."""
        self._trusted = trusted
        self._not_forwarded = _NOT_FORWARDED | {name.lower().encode("latin-1") for name in never_forward}

    def worker_headers(self, scope: Scope, ctx: RequestContext) -> dict[str, str]:
        raw: list[tuple[bytes, bytes]] = scope["headers"]
        hop_by_hop = _named_in_connection(raw)
        headers: dict[str, str] = {}
        client_forwarded_for: list[str] = []
        client_proto: str | None = None
        for name, value in raw:
            if name == b"x-forwarded-for":
                client_forwarded_for.append(value.decode("latin-1").strip())
            elif name == b"x-forwarded-proto":
                client_proto = value.decode("latin-1").strip()
            if name in self._not_forwarded or name in hop_by_hop:
                continue
            headers[name.decode("latin-1")] = value.decode("latin-1")
        peer = _peer(scope)
        proto = str(scope.get("scheme", "http"))
        forwarded_for = peer
        if peer and self._is_trusted(peer):
            chain = ", ".join(part for part in client_forwarded_for if part)
            forwarded_for = f"{chain}, {peer}" if chain else peer
            proto = client_proto or proto
        if forwarded_for:
            headers["x-forwarded-for"] = forwarded_for
        headers["x-forwarded-proto"] = proto
        headers["content-type"] = "application/json"
        headers["x-request-id"] = ctx.request_id
        if ctx.client_request_id is not None:
            headers[CLIENT_REQUEST_ID_HEADER] = ctx.client_request_id
        return headers

    def client_address(self, scope: Scope) -> str:
        """Who the client is, for the access log and the request's span: the peer, or behind a
        trusted proxy the nearest X-Forwarded-For entry that is not itself trusted (each trusted
        proxy appended the address it saw; anything left of that the client could have written)."""
        peer = _peer(scope)
        if not peer or not self._is_trusted(peer):
            return peer
        hops: list[str] = []
        for name, value in scope["headers"]:
            if name == b"x-forwarded-for":
                hops.extend(hop.strip() for hop in value.decode("latin-1").split(","))
        for hop in reversed(hops):
            if hop and not self._is_trusted(hop):
                return hop
        return peer

    def _is_trusted(self, peer: str) -> bool:
        if not self._trusted:
            return False
        try:
            address = ipaddress.ip_address(peer)
        except ValueError:
            return False  # a unix socket or similar: no address to trust
        return any(address in network for network in self._trusted)


def _peer(scope: Scope) -> str:
    client = scope.get("client")
    return str(client[0]) if client else ""


def _named_in_connection(raw: list[tuple[bytes, bytes]]) -> frozenset[bytes]:
    """Headers the client declared hop-by-hop by naming them in `Connection:`."""
    named: set[bytes] = set()
    for name, value in raw:
        if name == b"connection":
            named.update(token.strip().lower() for token in value.split(b",") if token.strip())
    return frozenset(named)
