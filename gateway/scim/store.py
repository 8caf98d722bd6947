"""The SCIM directory in Redis: users, groups, who is in which group, and the tombstones of
deleted users. This class owns every key name of it (all under gateway/redis/keys.py `scim`, one
`{scim}` hash tag, so each script runs on one Redis Cluster slot).

    users                 HASH  user id -> the user as SCIM JSON (without `groups`: derived)
    user-ids              ZSET  every user id, score 0: pages by rank (ZRANGE), never a scan
    user-keys             HASH  user id -> JSON array of its index values (what a write releases)
    users-by:userName     HASH  lower-cased userName -> id   (unique: 409 uniqueness)
    users-by:externalId   HASH  externalId -> id              (unique: it names one person at the IdP)
    users-by:email        HASH  lower-cased primary email -> id (unique: it names one person)
    groups, group-ids, group-keys, groups-by:displayName      the same for groups
    members:<group id>    HASH  user id -> the member entry's JSON ({"value", "display", ...})
    memberof:<user id>    SET   group ids: a person's groups without reading any group's members
    gone:<index>:<value>  STRING the deleted user's id, with a TTL: refused, not unknown, until then

Every read answers one request with bounded work: an `eq` filter is one HGET, a page is one
ZRANGE of at most `count` ids and one HMGET, a person's standing a few HGETs and one SMEMBERS of
their own groups. Nothing reads all users or all groups.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from gateway.redis import keys as redis_keys
from gateway.redis.client import RedisClient
from gateway.redis.keys import as_text
from gateway.redis.scripts import load_script
from gateway.redis.store import RedisStore

# A group's members, and the member entries one request may change (a PUT's or a POST's list,
# or a PATCH's values together): above either, the request is refused with invalidValue.
MAX_GROUP_MEMBERS = 50_000
MAX_MEMBERS_PER_REQUEST = 10_000
# A write that found the resource changed under it (a concurrent membership change) tries again.
_RETRIES = 5


@dataclass(frozen=True, slots=True)
class Kind:
    """One resource type's keys: `indexes` in the order their values are given."""

    name: str  # "users" or "groups"
    indexes: tuple[str, ...]

    @property
    def resources(self) -> str:
        return redis_keys.scim(self.name)

    @property
    def ids(self) -> str:
        return redis_keys.scim(self.name[:-1] + "-ids")

    @property
    def index_values(self) -> str:
        return redis_keys.scim(self.name[:-1] + "-keys")

    def index(self, attribute: str) -> str:
        return redis_keys.scim(f"{self.name}-by", attribute)


USERS = Kind("users", ("userName", "externalId", "email"))
GROUPS = Kind("groups", ("displayName",))


def members_key(group_id: str) -> str:
    return redis_keys.scim("members", group_id)


def memberof_key(user_id: str) -> str:
    return redis_keys.scim("memberof", user_id)


def tombstone_key(attribute: str, value: str) -> str:
    return redis_keys.scim("gone", attribute, value)


class Taken(Exception):
    """Another resource holds a unique value this write claims (409 uniqueness)."""

    def __init__(self, attribute: str) -> None:
        super().__init__(attribute)
        self.attribute = attribute


class Missing(Exception):
    """No such resource (404)."""


class UnknownMember(Exception):
    def __init__(self, user_id: str) -> None:
        super().__init__(user_id)
        self.user_id = user_id


class GroupFull(Exception):
    pass


class Changed(Exception):
    """The resource changed since it was read (a concurrent write): read it again."""


class Conflict(Exception):
    """The resource kept changing under a write: 409, the IdP retries."""


@dataclass(frozen=True, slots=True)
class Page:
    total: int
    items: list[dict[str, Any]]


class ScimStore(RedisStore):
    def __init__(self, redis: RedisClient, *, tombstone_ttl_s: float) -> None:
        super().__init__(redis)
        self._tombstone_ttl_s = max(1, int(tombstone_ttl_s))
        self._write = load_script(redis, "scim_write")
        self._delete = load_script(redis, "scim_delete")
        self._members = load_script(redis, "scim_members")

    # -- reads ---------------------------------------------------------------------------------

    async def get(self, kind: Kind, resource_id: str) -> dict[str, Any] | None:
        raw = await self.redis.hget(kind.resources, resource_id)
        return None if raw is None else _loads(raw)

    async def get_many(self, kind: Kind, ids: Sequence[str]) -> list[dict[str, Any]]:
        if not ids:
            return []
        raws = await self.redis.hmget(kind.resources, list(ids))
        return [_loads(raw) for raw in raws if raw is not None]

    async def find(self, kind: Kind, attribute: str, value: str) -> str | None:
        raw = await self.redis.hget(kind.index(attribute), value)
        return None if raw is None else as_text(raw)

    async def page(self, kind: Kind, start: int, count: int) -> Page:
        """`count` resources from the 0-based rank `start`, in id order, and how many there are."""
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.zcard(kind.ids)
            pipe.zrange(kind.ids, start, start + count - 1)
            total, ids = await pipe.execute()
        items = await self.get_many(kind, [as_text(i) for i in ids]) if count > 0 else []
        return Page(int(total), items)

    async def members(self, group_id: str) -> dict[str, dict[str, Any]]:
        return (await self.members_many([group_id]))[0]

    async def members_many(self, group_ids: Sequence[str]) -> list[dict[str, dict[str, Any]]]:
        """Each group's members (user id -> entry), for a page of groups in one round trip."""
        if not group_ids:
            return []
        async with self.redis.pipeline(transaction=False) as pipe:
            for group_id in group_ids:
                pipe.hgetall(members_key(group_id))
            replies = await pipe.execute()
        return [{as_text(uid): _loads(entry) for uid, entry in raw.items()} for raw in replies]

    async def groups_of(self, user_id: str) -> list[dict[str, Any]]:
        """The groups a user is in, as stored (id, displayName...), without their members."""
        return (await self.groups_of_many([user_id]))[0]

    async def groups_of_many(self, user_ids: Sequence[str]) -> list[list[dict[str, Any]]]:
        """Each user's groups, for a page of users in two round trips, not two per user."""
        if not user_ids:
            return []
        async with self.redis.pipeline(transaction=False) as pipe:
            for user_id in user_ids:
                pipe.smembers(memberof_key(user_id))
            memberships = [sorted(as_text(g) for g in ids) for ids in await pipe.execute()]
        groups = {
            g["id"]: g for g in await self.get_many(GROUPS, sorted({g for ids in memberships for g in ids}))
        }
        return [[groups[g] for g in ids if g in groups] for ids in memberships]

    async def tombstoned(self, attribute: str, value: str) -> bool:
        return bool(await self.redis.exists(tombstone_key(attribute, value)))

    async def person(self, subject: str | None, email: str | None) -> tuple[dict[str, Any] | None, bool]:
        """The user a signing-in person is: externalId == their subject, else userName or primary
        email == their verified email (in that order). Returns (user, tombstoned): a user deleted
        within the tombstone TTL is (None, True)."""
        given = [("externalId", subject), ("userName", email), ("email", email)]
        probes = [(attribute, value) for attribute, value in given if value]
        if not probes:
            return None, False
        async with self.redis.pipeline(transaction=False) as pipe:
            for attribute, value in probes:
                pipe.hget(USERS.index(attribute), value)
            for attribute, value in probes:
                pipe.exists(tombstone_key(attribute, value))
            replies = await pipe.execute()
        ids = [as_text(r) for r in replies[: len(probes)] if r is not None]
        for user_id in ids:
            user = await self.get(USERS, user_id)
            if user is not None:
                return user, False
        return None, any(replies[len(probes) :])

    # -- writes --------------------------------------------------------------------------------

    async def put(
        self,
        kind: Kind,
        resource_id: str,
        resource: Mapping[str, Any],
        values: Sequence[str],
        *,
        create: bool,
        read: Mapping[str, Any] | None = None,
    ) -> None:
        """Stores `resource` under `resource_id` with its index values (in `kind.indexes`' order,
        "" for none); raises Taken, or Missing for a replace of an absent id. `read`: what the
        caller read and changed, for a PATCH: Changed when it is no longer what is stored."""
        tombstones = (
            [tombstone_key(a, v) for a, v in zip(kind.indexes, values, strict=True) if v]
            if kind is USERS
            else []
        )
        keys = [kind.resources, kind.ids, kind.index_values, *map(kind.index, kind.indexes), *tombstones]
        expected = b"" if read is None else orjson.dumps(read)  # the bytes `get` read, as stored
        args = [
            resource_id,
            "create" if create else "replace",
            orjson.dumps(resource),
            len(values),
            *values,
            expected,
        ]
        result = [as_text(r) if isinstance(r, bytes) else r for r in await self._write(keys, args)]
        if result[0] == "taken":
            raise Taken(kind.indexes[int(result[1]) - 1])
        if result[0] == "missing":
            raise Missing()
        if result[0] == "changed":
            raise Changed()
        if result[0] != "ok":  # "exists": a random 128-bit id met itself
            raise Conflict()

    async def delete(self, kind: Kind, resource_id: str) -> dict[str, Any]:
        """Deletes the resource and its memberships; a user leaves tombstones under the values
        that named them. Returns what was stored; raises Missing."""
        for _ in range(_RETRIES):
            async with self.redis.pipeline(transaction=False) as pipe:
                pipe.hget(kind.resources, resource_id)
                pipe.hget(kind.index_values, resource_id)
                if kind is USERS:
                    pipe.smembers(memberof_key(resource_id))
                else:
                    pipe.hkeys(members_key(resource_id))
                raw, stored_values, others = await pipe.execute()
            if raw is None:
                raise Missing()
            others = sorted(as_text(o) for o in others)
            values_json = as_text(stored_values) if stored_values is not None else "[]"
            values = orjson.loads(values_json)
            if kind is USERS:
                own, sides = memberof_key(resource_id), [members_key(g) for g in others]
                tombstones = [tombstone_key(a, v) for a, v in zip(kind.indexes, values, strict=False) if v]
            else:
                own, sides, tombstones = members_key(resource_id), [memberof_key(u) for u in others], []
            keys = [
                kind.resources,
                kind.ids,
                kind.index_values,
                *map(kind.index, kind.indexes),
                own,
                *sides,
                *tombstones,
            ]
            args = [resource_id, len(kind.indexes), len(others), self._tombstone_ttl_s, values_json, *others]
            result = as_text((await self._delete(keys, args))[0])
            if result == "ok":
                return _loads(raw)
            if result == "missing":
                raise Missing()
        raise Conflict()

    async def change_members(
        self, group_id: str, changes: Mapping[str, Mapping[str, Any] | None], *, exact: bool
    ) -> None:
        """Adds (an entry) or removes (None) members of a group. `exact`: `changes` names every
        member before and after (a replace); a member added meanwhile makes it retry, so a
        replace never leaves a member it did not name. Raises Missing, UnknownMember, GroupFull."""
        for _ in range(_RETRIES):
            pairs = dict(changes)
            if exact:
                for uid in await self.redis.hkeys(members_key(group_id)):
                    pairs.setdefault(as_text(uid), None)
            if not pairs:
                if await self.get(GROUPS, group_id) is None:
                    raise Missing()
                return
            uids = sorted(pairs)
            keys = [USERS.resources, GROUPS.resources, members_key(group_id), *map(memberof_key, uids)]
            args: list[Any] = [group_id, "set" if exact else "change", MAX_GROUP_MEMBERS]
            for uid in uids:
                entry = pairs[uid]
                args += [uid, b"" if entry is None else orjson.dumps(entry)]
            result = [as_text(r) if isinstance(r, bytes) else r for r in await self._members(keys, args)]
            if result[0] == "ok":
                return
            if result[0] == "missing":
                raise Missing()
            if result[0] == "unknown":
                raise UnknownMember(str(result[1]))
            if result[0] == "full":
                raise GroupFull()
        raise Conflict()


def _loads(raw: bytes | str) -> dict[str, Any]:
    value: dict[str, Any] = orjson.loads(raw)
    return value
