"""What every worker call shares, whichever connection carries it: the closed set of its errors
and its target, parsed from the endpoint's URL once (gateway/worker/client.py)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit


class WorkerHttpError(Exception):
    """Every failure of a worker call (the message names no address: callers log the endpoint)."""


class Unreachable(WorkerHttpError):
    """No connection to the worker, or it closed before the answer's head."""


class LocalExhaustion(Unreachable):
    """This process could not open a connection (no descriptor, no port): not the worker's doing."""


class Malformed(WorkerHttpError):
    """The worker's bytes are not an HTTP answer (or a head past MAX_HEAD_BYTES)."""


class Unanswered(WorkerHttpError):
    """The connection closed after the request went out, before any byte of an answer: the worker
    may have read it (and generated, or stored a response), so it is never sent again."""


class WrongAnswer(Malformed):
    """An answer the gateway will not serve: compressed though identity was asked for (its usage
    could not be read), or echoing another request's x-request-id (a late answer on a reused
    connection). The connection is closed."""


class BrokenOff(WorkerHttpError):
    """The answer's body ended before its end, or went on as bytes that are not HTTP."""


class TooLarge(WorkerHttpError):
    """A short call's answer (a probe, a scrape, a token count, a stored response) past its bound."""


@dataclass(frozen=True, slots=True)
class SmallAnswer:
    """A short call's whole answer; header names in lower case."""

    status: int
    body: bytes
    headers: Mapping[str, str]


def split_url(url: str) -> tuple[str, str]:
    """A side call's URL as (the worker's base URL, the path and query asked for)."""
    parts = urlsplit(url)
    path = parts.path or "/"
    return f"{parts.scheme}://{parts.netloc}", path + (f"?{parts.query}" if parts.query else "")


@dataclass(frozen=True, slots=True)
class Target:
    key: tuple[str, str, int]
    host: str
    port: int
    tls: bool
    prefix: bytes  # the URL's path, before the request's own
    host_header: bytes


def parse_target(url: str) -> Target:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise Unreachable("not an http(s) URL")
    tls = parts.scheme == "https"
    port = parts.port or (443 if tls else 80)
    host = parts.hostname
    shown = f"[{host}]" if ":" in host else host
    default = port == (443 if tls else 80)
    return Target(
        key=(parts.scheme, host, port),
        host=host,
        port=port,
        tls=tls,
        prefix=parts.path.rstrip("/").encode("latin-1"),
        host_header=(shown if default else f"{shown}:{port}").encode("latin-1"),
    )
