"""/scim/v2/Groups: create, read, list, replace, patch and delete groups and their members.

A group's members are users of the directory (nested groups are refused: role bindings name
groups, and a person's groups are the ones that list them). Members live apart from the group
(store.py), so Okta's and Entra ID's membership PATCHes (add `members`; remove
`members[value eq "…"]`, or Entra's remove with the members in `value`) change only the members
named, whatever the group's size; any other PATCH reads the group whole and applies scim2-models'
PatchOp to it. One request changes at most MAX_MEMBERS_PER_REQUEST members.
"""

from __future__ import annotations

import contextlib
import re
import uuid
from typing import Any

from scim2_models import (
    Context,
    NotFoundException,
    PatchOp,
    ResponseParameters,
    SCIMException,
    UniquenessException,
)
from starlette.responses import Response

from gateway.scim import render
from gateway.scim.errors import ScimError, invalid_value
from gateway.scim.http import ScimRequest, with_status
from gateway.scim.models import POLICY, GroupModel, group_index_values
from gateway.scim.query import indexed_lookup, page_bounds, response_parameters, search_request
from gateway.scim.store import (
    GROUPS,
    MAX_GROUP_MEMBERS,
    MAX_MEMBERS_PER_REQUEST,
    Changed,
    GroupFull,
    Missing,
    Taken,
    UnknownMember,
)

ENDPOINT = "Groups"
_MEMBER_PATH = re.compile(r'members\[value eq "([^"\\]+)"\]', re.IGNORECASE)
Changes = dict[str, dict[str, Any] | None]
PATCH_ATTEMPTS = 5  # as for users: a PATCH that meets a concurrent write applies itself again


def _missing(group_id: str) -> ScimError:
    return ScimError(NotFoundException(detail=f"No group has the id '{group_id[:100]}'."))


def summary(group: dict[str, Any]) -> dict[str, Any]:
    return {"group": group.get("id"), "displayName": group.get("displayName")}


def _entries(members: list[Any] | None) -> dict[str, dict[str, Any]]:
    """Member entries by user id, as stored: what the IdP sent of each, without `$ref` (derived)."""
    out: dict[str, dict[str, Any]] = {}
    for member in members or ():
        entry = (
            member
            if isinstance(member, dict)
            else member.model_dump(scim_ctx=Context.RESOURCE_QUERY_RESPONSE)
        )
        value = entry.get("value")
        if not isinstance(value, str) or not value:
            raise invalid_value("Each member needs a `value`: the id of a user.")
        if entry.get("type") not in (None, "User"):
            raise invalid_value(
                "Only users can be members of a group here: groups in groups are not supported."
            )
        out[value] = {k: v for k, v in entry.items() if k != "$ref"}
    if len(out) > MAX_MEMBERS_PER_REQUEST:
        raise invalid_value(
            f"At most {MAX_MEMBERS_PER_REQUEST} members per request: add more with further PATCH requests."
        )
    return out


def _wants_members(params: ResponseParameters[Any] | None) -> bool:
    if params is None:
        return True
    if params.excluded_attributes:
        return not any(str(p).lower().endswith("members") for p in params.excluded_attributes)
    if params.attributes:
        return any(str(p).lower().split(".")[0].endswith("members") for p in params.attributes)
    return True


async def shown(r: ScimRequest, group: dict[str, Any], params: ResponseParameters[Any] | None = None) -> Any:
    (one,) = await shown_many(r, [group], params)
    return one


async def shown_many(
    r: ScimRequest, groups: list[dict[str, Any]], params: ResponseParameters[Any] | None = None
) -> list[Any]:
    """Groups as responses show them, their members read in one round trip for the page."""
    wanted = _wants_members(params)
    members = await r.deps.directory.store.members_many([g["id"] for g in groups]) if wanted else []
    out = []
    for i, group in enumerate(groups):
        data = dict(group)
        if wanted and members[i]:
            data["members"] = [
                {**entry, "$ref": f"{r.base_url}/Users/{uid}"} for uid, entry in sorted(members[i].items())
            ]
        out.append(render.shown(GroupModel, data, r.base_url, ENDPOINT))
    return out


async def _change(r: ScimRequest, group_id: str, changes: Changes, *, exact: bool) -> None:
    try:
        await r.deps.directory.store.change_members(group_id, changes, exact=exact)
    except UnknownMember as exc:
        raise invalid_value(f"No user has the id '{exc.user_id[:100]}': provision the user first.") from None
    except GroupFull:
        raise invalid_value(f"A group has at most {MAX_GROUP_MEMBERS} members.") from None
    except Missing:
        raise _missing(group_id) from None


async def _put(
    r: ScimRequest,
    group_id: str,
    stored: dict[str, Any],
    *,
    create: bool,
    read: dict[str, Any] | None = None,
) -> None:
    try:
        await r.deps.directory.store.put(
            GROUPS, group_id, stored, group_index_values(stored), create=create, read=read
        )
    except Taken:
        # Role bindings name groups by displayName: two groups of one name would be one group.
        raise ScimError(UniquenessException(detail="Another group has this displayName.")) from None
    except Missing:
        raise _missing(group_id) from None


async def create(r: ScimRequest) -> Response:
    group = GroupModel.model_validate(
        r.json(), scim_ctx=Context.RESOURCE_CREATION_REQUEST, scim_policy=POLICY
    )
    entries = _entries(group.members)
    group_id = uuid.uuid4().hex
    stored = render.stamp(group, group_id, "Group")
    await _put(r, group_id, stored, create=True)
    try:
        await _change(r, group_id, dict(entries), exact=True)
    except ScimError:
        await r.deps.directory.store.delete(GROUPS, group_id)  # all or nothing, as the IdP expects
        raise
    await r.journal().write(
        "scim.group.created",
        team="",
        before={},
        after={**summary(stored), "members_added": sorted(entries)[:20]},
    )
    return render.one(await shown(r, stored), 201, context=Context.RESOURCE_CREATION_RESPONSE)


async def read(r: ScimRequest) -> Response:
    params = response_parameters(GroupModel, r.request.query_params)
    stored = await r.deps.directory.store.get(GROUPS, r.param("id"))
    if stored is None:
        raise _missing(r.param("id"))
    return render.one(await shown(r, stored, params), params=params)


async def search(r: ScimRequest, query: Any = None) -> Response:
    request = search_request(GroupModel, query if query is not None else r.request.query_params)
    start, count = page_bounds(request)
    store = r.deps.directory.store
    if request.filter is None:
        page = await store.page(GROUPS, start, count)
        found = await shown_many(r, page.items, request)
        return render.listing(GroupModel, page.total, start, found, request)
    index, value = indexed_lookup(GROUPS, request.filter)
    group_id = value if index == "id" else await store.find(GROUPS, index, value)
    candidate = await store.get(GROUPS, group_id) if group_id else None
    # Members are read to match a filter on them (Entra: `id eq "…" and members eq "…"`).
    models = [await shown(r, candidate)] if candidate is not None else []
    matches = [m for m in models if request.filter.match(m)]
    if not _wants_members(request):
        for model in matches:
            model.members = None
    return render.listing(GroupModel, len(matches), start, matches[start : start + count], request)


async def search_post(r: ScimRequest) -> Response:
    return await search(r, {k: str(v) for k, v in r.json().items() if isinstance(v, str | int)})


async def replace(r: ScimRequest) -> Response:
    group_id = r.param("id")
    before = await r.deps.directory.store.get(GROUPS, group_id)
    if before is None:
        raise _missing(group_id)
    group = GroupModel.model_validate(
        r.json(), scim_ctx=Context.RESOURCE_REPLACEMENT_REQUEST, scim_policy=POLICY
    )
    entries = _entries(group.members)
    stored = render.stamp(group, group_id, "Group", render.date_of(before))
    await _put(r, group_id, stored, create=False)
    await _change(r, group_id, dict(entries), exact=True)
    await r.journal().write("scim.group.replaced", team="", before=summary(before), after=summary(stored))
    return render.one(await shown(r, stored))


def _fields(group: dict[str, Any]) -> dict[str, Any]:
    return {name: value for name, value in group.items() if name != "meta"}


def _membership_only(body: dict[str, Any]) -> Changes | None:
    """The member changes of a PATCH that only adds or removes members; None for any other."""
    changes: Changes = {}
    for op in body.get("Operations") or ():
        verb, path, value = str(op.get("op", "")).lower(), str(op.get("path") or ""), op.get("value")
        matched = _MEMBER_PATH.fullmatch(path)
        if verb == "remove" and matched and value is None:
            changes[matched.group(1)] = None
        elif path.lower() == "members" and verb in ("add", "remove") and isinstance(value, list):
            for uid, entry in _entries(value).items():
                changes[uid] = entry if verb == "add" else None
        else:
            return None
    if len(changes) > MAX_MEMBERS_PER_REQUEST:
        raise invalid_value(f"At most {MAX_MEMBERS_PER_REQUEST} member changes per request.")
    return changes


async def patch(r: ScimRequest) -> Response:
    group_id = r.param("id")
    body = r.json()
    operations = PatchOp[GroupModel].model_validate(
        body, scim_ctx=Context.RESOURCE_PATCH_REQUEST, scim_policy=POLICY
    )
    changes = _membership_only(body)
    for _ in range(PATCH_ATTEMPTS):
        before = await r.deps.directory.store.get(GROUPS, group_id)
        if before is None:
            raise _missing(group_id)
        after = before
        if changes is None:
            with contextlib.suppress(Changed):
                after, member_changes = await _patched(r, operations, before)
                return await _settle(r, before, after, member_changes)
            continue
        return await _settle(r, before, after, changes)
    raise ScimError(with_status(SCIMException(detail="The group kept changing: try again."), 409))


async def _patched(
    r: ScimRequest, operations: PatchOp[Any], before: dict[str, Any]
) -> tuple[dict[str, Any], Changes]:
    """Any other PATCH, on the whole group (members included) by scim2-models: the group as
    written, and its members' changes. Changed: someone wrote the group meanwhile."""
    group = await shown(r, before)
    old = _entries(group.members)
    if not operations.patch(group, scim_policy=POLICY):
        return before, {}
    new = _entries(group.members)
    changes: Changes = {uid: entry for uid, entry in new.items() if old.get(uid) != entry}
    changes.update({uid: None for uid in old.keys() - new.keys()})
    after = render.stamp(group, before["id"], "Group", render.date_of(before))
    if _fields(after) == _fields(before):
        return before, changes
    await _put(r, before["id"], after, create=False, read=before)
    return after, changes


async def _settle(
    r: ScimRequest, before: dict[str, Any], after: dict[str, Any], changes: Changes
) -> Response:
    if changes:
        await _change(r, before["id"], changes, exact=False)
    added = sorted(uid for uid, entry in changes.items() if entry is not None)
    removed = sorted(uid for uid, entry in changes.items() if entry is None)
    if changes or after is not before:
        await r.journal().write(
            "scim.group.patched",
            team="",
            before=summary(before),
            after={**summary(after), "members_added": added[:20], "members_removed": removed[:20]},
        )
    return render.one(await shown(r, after))


async def delete(r: ScimRequest) -> Response:
    group_id = r.param("id")
    try:
        gone = await r.deps.directory.store.delete(GROUPS, group_id)
    except Missing:
        raise _missing(group_id) from None
    await r.journal().write("scim.group.deleted", team="", before=summary(gone), after={})
    return Response(status_code=204)
