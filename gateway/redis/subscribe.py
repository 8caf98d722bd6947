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

from redis.asyncio.client import PubSub
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import RedisClusterException

from gateway.redis.client import ClusterUnavailableError, RedisClient


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
