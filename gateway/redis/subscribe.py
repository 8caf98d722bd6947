"""Where a replica follows a pub/sub channel (the key invalidations): the one Redis, or on a
cluster any one node.

On a cluster a plain PUBLISH reaches every node, primaries and replicas alike, so a subscriber
hears every message wherever it listens. Sharded pub/sub (SPUBLISH) would put the channel on one
shard, but a key change is published from inside its team's write, on the team's slot, whose
shard the channel does not share; and one shard losing its primary would silence the channel for
every replica at once. Broadcast costs every node one message per key change, which is rare.

A subscription dropped by its node (the node died, was failed over or restarted) is opened again
on the next node; the caller counts attempts, so a dead node is not retried first forever.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from redis.asyncio.client import PubSub
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import RedisClusterException, RedisError

from gateway.redis.client import ClusterUnavailableError, RedisClient
from gateway.redis.keys import as_text

log = logging.getLogger("sluicegate.redis")


async def open_subscriber(redis: RedisClient, attempt: int) -> PubSub:
    """A PubSub (not yet subscribed) ignoring subscribe confirmations: on a cluster, on its
    `attempt`-th node in a stable order, wrapping around."""
    if not isinstance(redis, RedisCluster):
        return redis.pubsub(ignore_subscribe_messages=True)
    try:
        await redis.initialize()  # at once when the slot map is already known
    except RedisClusterException as exc:  # no seed node reachable: outside RedisError's tree
        raise ClusterUnavailableError(type(exc).__name__) from exc
    nodes = sorted(redis.get_nodes(), key=lambda node: node.name)
    if not nodes:
        raise ClusterUnavailableError("no cluster node known")
    return redis.pubsub(node=nodes[attempt % len(nodes)], ignore_subscribe_messages=True)


async def follow(
    redis: RedisClient,
    channel: str,
    on_message: Callable[[str], None],
    on_subscribed: Callable[[], None],
    *,
    what: str,
) -> None:
    """Runs until cancelled: each message's text to `on_message`; `on_subscribed` after each
    (re)subscription (what was published while it was down is unknown). A lost subscription is
    opened again, on a cluster on the next node, with a backoff."""
    backoff = 0.1
    attempt = 0
    while True:
        pubsub: PubSub | None = None
        try:
            pubsub = await open_subscriber(redis, attempt)
            await pubsub.subscribe(channel)
            on_subscribed()
            backoff = 0.1
            async for message in pubsub.listen():
                if message["type"] == "message":
                    on_message(as_text(message["data"]))
        except (RedisError, OSError) as exc:
            log.warning("%s feed lost (%s); retrying", what, type(exc).__name__)
            attempt += 1  # on a cluster: the next node
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 5.0)
        finally:
            if pubsub is not None:
                with contextlib.suppress(RedisError, OSError):
                    await pubsub.aclose()  # type: ignore[no-untyped-call]  # untyped in redis-py
