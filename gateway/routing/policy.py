"""Routing policies: plain functions with one shape, `(candidates, request, rng) -> endpoint`.

The candidates carry their own stats (this replica's in-flight count, the load scraped from the
worker, a hashing seed): a policy reads them and nothing else, holds no state, awaits nothing and is
called with a non-empty list of endpoints that may take the request now (usable, a free slot, not
already tried). It runs on every request, so it allocates as little as it can.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from gateway.routing.share import ShareTicket

_MASK64 = (1 << 64) - 1


class EndpointView(Protocol):
    @property
    def url(self) -> str: ...

    @property
    def inflight(self) -> int: ...

    @property
    def load_base(self) -> float:
        """The scraped load minus this replica's in-flight count at the scrape (0 when unknown):
        `load_base + inflight` estimates the endpoint's load now."""
        ...

    @property
    def waiting(self) -> int:
        """Requests queued in the worker's engine at the last scrape (0 when unknown)."""
        ...

    @property
    def hrw_seed(self) -> int: ...


@dataclass(frozen=True, slots=True)
class CachedPrefix:
    """What prefix_affinity reads (gateway.routing.prefix fills it in right before the policy):
    the candidate URLs that recently served the longest prefix of the request's prompt any of
    them served, with its length in blocks (empty: none served any), and how much more loaded
    than the least loaded candidate such a one may be and still be chosen."""

    lengths: Mapping[str, int]
    max_extra_load: float


@dataclass(frozen=True, slots=True)
class RouteRequest:
    model: str
    user: str | None = None
    session_id: str | None = None
    team: str = ""
    share_weight: int = 1
    # The endpoint URL that must serve the request (it holds state the request continues).
    pinned: str | None = None
    # The prompt's block hashes (gateway.routing.prefix.block_hashes), computed once per request
    # for prefix-routed models; empty for the others.
    blocks: tuple[bytes, ...] = ()
    # The block size `blocks` were cut at (prefix.DEFAULT_BLOCK_BYTES unless said): a pool routed
    # by prefix with another size ignores them.
    block_bytes: int = 512
    cached: CachedPrefix | None = None
    # Its place in a token fair-share queue (gateway.routing.share): charged at each dispatch,
    # corrected at settlement. None: a default ticket of the team's weight.
    share: ShareTicket | None = None
    # A batch line (gateway/batch/): takes a free slot or none, never a place in the pool's queue,
    # so no interactive request ever waits behind a line that has not started.
    no_wait: bool = False

    @property
    def affinity_key(self) -> str | None:
        """The session (gateway/routing/session.py), scoped by the caller's team: a client
        chooses the value, so it places its own team's requests and no one else's."""
        value = self.session_id or self.user
        return None if value is None else f"{self.team}\x00{value}"


Policy = Callable[[Sequence[EndpointView], RouteRequest, random.Random], EndpointView]


def least_outstanding(
    candidates: Sequence[EndpointView], request: RouteRequest, rng: random.Random
) -> EndpointView:
    """Power of two choices over this replica's in-flight counts: near-best balance without
    herding every replica onto the same 'least loaded' endpoint."""
    n = len(candidates)
    if n == 1:
        return candidates[0]
    first = int(rng.random() * n)
    second = (first + 1 + int(rng.random() * (n - 1))) % n
    a, b = candidates[first], candidates[second]
    return a if a.inflight <= b.inflight else b


def least_loaded(
    candidates: Sequence[EndpointView], request: RouteRequest, rng: random.Random
) -> EndpointView:
    """The endpoint with the least estimated load: its engine's own numbers from the last scrape
    (waiting dominates, then running, then KV-cache use) plus what this replica sent it since.

    A full scan; equal endpoints share the traffic by a random draw among the ties (the common
    case when idle). Without a fresh scrape `load_base` is 0 and this is least-in-flight."""
    best = candidates[0]
    best_score = best.load_base + best.inflight
    ties = 1
    for candidate in candidates[1:]:
        score = candidate.load_base + candidate.inflight
        if score < best_score:
            best, best_score, ties = candidate, score, 1
        elif score == best_score:
            ties += 1
            if rng.random() * ties < 1.0:
                best = candidate
    return best


def affinity_hash(key: str) -> int:
    """A hash stable across processes (Python's own `hash` is salted per process), so every
    replica sends one session to the same endpoint."""
    return int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "little")


def endpoint_seed(url: str) -> int:
    return affinity_hash("endpoint:" + url)


def _mix(x: int) -> int:
    # splitmix64's finalizer: key ^ seed alone would rank endpoints the same for similar keys.
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


def session_affinity(
    candidates: Sequence[EndpointView], request: RouteRequest, rng: random.Random
) -> EndpointView:
    """Rendezvous hashing on the session (`affinity_key`: an agent's session header, else
    `prompt_cache_key`, else the `user` field, with the team; gateway/routing/session.py) over
    the endpoints that may take the request, so a conversation keeps hitting the engine whose
    prefix cache holds it. An ejected, unhealthy or full endpoint is not a candidate: its
    sessions move to their next-ranked endpoint and come back when it does, the rest stay put.
    When the chosen engine is queueing while another is not, or there is no key, this is
    least_loaded."""
    key = request.affinity_key
    if key is None or len(candidates) == 1:
        return least_loaded(candidates, request, rng)
    key_hash = affinity_hash(key)
    best = candidates[0]
    best_rank = _mix(key_hash ^ best.hrw_seed)
    for candidate in candidates[1:]:
        rank = _mix(key_hash ^ candidate.hrw_seed)
        if rank > best_rank:
            best, best_rank = candidate, rank
    if best.waiting > 0:
        other = least_loaded(candidates, request, rng)
        if other.waiting == 0:
            return other
    return best


def prefix_affinity(
    candidates: Sequence[EndpointView], request: RouteRequest, rng: random.Random
) -> EndpointView:
    """The endpoint whose engine most likely holds the longest prefix of this prompt in its KV
    cache (least_loaded among equals), unless its estimated load is more than
    `max_extra_load` above the least loaded candidate's: then the least loaded one, whose
    engine computes the prompt from scratch sooner than the busy one would reach it.

    Where the prefix does not decide (no cached prefix anywhere, or several endpoints hold the
    longest one, as with an agent's fixed system prompt and tools that every engine holds), a
    request with a session goes where session_affinity sends it: every replica places the
    session's first turn on the same engine, so its next turn finds its prefix there even before
    the index is shared. Without a session that is least_loaded, the same draws from `rng`
    included."""
    cached = request.cached
    lengths = cached.lengths if cached is not None else None
    if not lengths:
        return session_affinity(candidates, request, rng)
    longest = 0
    for candidate in candidates:
        length = lengths.get(candidate.url, 0)
        if length > longest:
            longest = length
    if longest == 0 or cached is None:
        return session_affinity(candidates, request, rng)
    holders = [c for c in candidates if lengths.get(c.url, 0) == longest]
    sticky = holders[0] if len(holders) == 1 else session_affinity(holders, request, rng)
    if len(holders) == len(candidates):
        return sticky
    least = least_loaded(candidates, request, rng)
    sticky_load = sticky.load_base + sticky.inflight
    if sticky_load - (least.load_base + least.inflight) > cached.max_extra_load:
        return least
    return sticky


POLICIES: dict[str, Policy] = {
    "least_outstanding": least_outstanding,
    "least_loaded": least_loaded,
    "session_affinity": session_affinity,
    "prefix_affinity": prefix_affinity,
}
# Policies that read the workers' own load, so their pools' endpoints are scraped.
SCRAPED_POLICIES = frozenset({"least_loaded", "session_affinity", "prefix_affinity"})
