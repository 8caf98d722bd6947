"""Where a client's key may arrive: each client API declares its own (gateway.apis.spec), and
the app hands all of them to the authenticator and to the forwarding rule, so the header that
carries a key and the rule that never forwards it are written once, side by side.

A request may carry its key in more than one of them (a proxy or SDK that adds one on top of
another); two different keys are refused rather than one picked: which team pays must never
depend on precedence.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from gateway.errors import ErrorCode, GatewayError


@dataclass(frozen=True, slots=True)
class Credential:
    """A header (`scheme`: the header reads `<scheme> <key>`, as `Authorization: Bearer`), or a
    query parameter (a key in a URL: never logged, gateway.edge.middleware)."""

    header: str | None = None  # lower case
    scheme: str | None = None
    query: str | None = None

    def keys(self, headers: Mapping[str, str], query: Mapping[str, str]) -> set[str]:
        """Every key this credential carries: a header or parameter sent twice carries two."""
        if self.query is not None:
            values = _every(query, self.query)
        else:
            assert self.header is not None
            values = _every(headers, self.header)
        return self.keys_in(values)

    def keys_in(self, values: list[str]) -> set[str]:
        """The keys in the values of this credential's header or parameter."""
        scheme = self.scheme.lower() if self.query is None and self.scheme is not None else None
        keys: set[str] = set()
        for value in values:
            key = value
            if scheme is not None:
                given, _, key = value.partition(" ")
                if given.lower() != scheme:
                    continue
            key = key.strip()
            if key:
                keys.add(key)
        return keys

    def shown(self) -> str:
        if self.query is not None:
            return f"'?{self.query}=<key>'"
        name = "Authorization" if self.header == "authorization" else self.header
        return f"'{name}: {self.scheme.capitalize() + ' ' if self.scheme else ''}<key>'"


BEARER = Credential(header="authorization", scheme="bearer")


def described(credentials: Sequence[Credential]) -> str:
    """ "'Authorization: Bearer <key>' or 'x-api-key: <key>'": for an error message."""
    shown = [c.shown() for c in credentials]
    return shown[0] if len(shown) == 1 else ", ".join(shown[:-1]) + " or " + shown[-1]


def read_key(
    credentials: Sequence[Credential], headers: Mapping[str, str], query: Mapping[str, str]
) -> str | None:
    # Each credential's values first, and its keys only where it has any: a request carries one
    # of the (up to four) places a key may arrive, and this runs on every request.
    found: set[str] = set()
    for credential in credentials:
        if credential.query is not None:
            values = _every(query, credential.query) if query else []
        else:
            assert credential.header is not None
            values = _every(headers, credential.header)
        if values:
            found |= credential.keys_in(values)
    if len(found) > 1:
        raise GatewayError(
            ErrorCode.INVALID_API_KEY,
            f"Two different API keys: send one key, as {described(credentials)}.",
        )
    return next(iter(found), None)


def _every(source: Mapping[str, str], name: str) -> list[str]:
    """All values of a header or query parameter (Starlette's Headers and QueryParams keep each
    repeat; a plain mapping has one)."""
    getlist = getattr(source, "getlist", None)
    if getlist is not None:
        return list(getlist(name))
    value = source.get(name)
    return [] if value is None else [value]


def secret_headers(credentials: Iterable[Credential]) -> frozenset[str]:
    """The headers that carry a key: a worker never gets them."""
    return frozenset(c.header for c in credentials if c.header is not None)
