"""/scim/v2/Users: create, read, list (filter, pages), replace, patch and delete people.

A user's `groups` is derived from the groups that list them (read-only, RFC 7643 §4.1.2). A
deleted user's role bindings (those naming their externalId, userName or email) go with them,
and tombstones refuse their still-valid IdP tokens (gateway/identity/directory.py). Keys they
created keep working: keys belong to teams, and the audit log still names who created them.
"""

from __future__ import annotations

import contextlib
import uuid
from typing import Any

from scim2_models import Context, NotFoundException, PatchOp, SCIMException, UniquenessException
from starlette.responses import Response

from gateway.scim import render
from gateway.scim.errors import ScimError
from gateway.scim.http import ScimRequest, with_status
from gateway.scim.models import POLICY, UserModel, user_index_values
from gateway.scim.query import indexed_lookup, page_bounds, response_parameters, search_request
from gateway.scim.store import USERS, Changed, Missing, Taken

ENDPOINT = "Users"
# A PATCH that meets a concurrent write to the same user applies itself again to what is there.
PATCH_ATTEMPTS = 5


def _missing(user_id: str) -> ScimError:
    return ScimError(NotFoundException(detail=f"No user has the id '{user_id[:100]}'."))


def _taken(exc: Taken) -> ScimError:
    name = "primary email" if exc.attribute == "email" else exc.attribute
    return ScimError(UniquenessException(detail=f"Another user has this {name}."))


def summary(user: dict[str, Any]) -> dict[str, Any]:
    """What the audit log records of a user: who, never the whole record."""
    return {
        "user": user.get("id"),
        "userName": user.get("userName"),
        "externalId": user.get("externalId"),
        "active": user.get("active"),
    }


async def with_groups(r: ScimRequest, users: list[dict[str, Any]]) -> list[Any]:
    out = []
    memberships = await r.deps.directory.store.groups_of_many([user["id"] for user in users])
    for user, member_of in zip(users, memberships, strict=True):
        groups = [
            {
                "value": g["id"],
                "display": g.get("displayName"),
                "$ref": f"{r.base_url}/Groups/{g['id']}",
                "type": "direct",
            }
            for g in member_of
        ]
        out.append(
            render.shown(UserModel, {**user, "groups": groups} if groups else user, r.base_url, ENDPOINT)
        )
    return out


async def create(r: ScimRequest) -> Response:
    user = UserModel.model_validate(r.json(), scim_ctx=Context.RESOURCE_CREATION_REQUEST, scim_policy=POLICY)
    user_id = uuid.uuid4().hex
    stored = render.stamp(user, user_id, "User")
    try:
        await r.deps.directory.store.put(USERS, user_id, stored, user_index_values(stored), create=True)
    except Taken as exc:
        raise _taken(exc) from None
    await r.journal().write("scim.user.created", team="", before={}, after=summary(stored))
    (shown,) = await with_groups(r, [stored])
    return render.one(shown, 201, context=Context.RESOURCE_CREATION_RESPONSE)


async def read(r: ScimRequest) -> Response:
    params = response_parameters(UserModel, r.request.query_params)
    stored = await r.deps.directory.store.get(USERS, r.param("id"))
    if stored is None:
        raise _missing(r.param("id"))
    (shown,) = await with_groups(r, [stored])
    return render.one(shown, params=params)


async def search(r: ScimRequest, query: Any = None) -> Response:
    request = search_request(UserModel, query if query is not None else r.request.query_params)
    start, count = page_bounds(request)
    store = r.deps.directory.store
    if request.filter is None:
        page = await store.page(USERS, start, count)
        return render.listing(UserModel, page.total, start, await with_groups(r, page.items), request)
    index, value = indexed_lookup(USERS, request.filter)
    user_id = value if index == "id" else await store.find(USERS, index, value)
    candidate = await store.get(USERS, user_id) if user_id else None
    models = await with_groups(r, [candidate] if candidate is not None else [])
    matches = [model for model in models if request.filter.match(model)]
    return render.listing(UserModel, len(matches), start, matches[start : start + count], request)


async def search_post(r: ScimRequest) -> Response:
    return await search(r, {k: str(v) for k, v in r.json().items() if isinstance(v, str | int)})


async def replace(r: ScimRequest) -> Response:
    user_id = r.param("id")
    store = r.deps.directory.store
    before = await store.get(USERS, user_id)
    if before is None:
        raise _missing(user_id)
    user = UserModel.model_validate(
        r.json(), scim_ctx=Context.RESOURCE_REPLACEMENT_REQUEST, scim_policy=POLICY
    )
    return await _write(
        r, before, render.stamp(user, user_id, "User", render.date_of(before)), "scim.user.replaced"
    )


async def patch(r: ScimRequest) -> Response:
    user_id = r.param("id")
    store = r.deps.directory.store
    operations = PatchOp[UserModel].model_validate(
        r.json(), scim_ctx=Context.RESOURCE_PATCH_REQUEST, scim_policy=POLICY
    )
    for _ in range(PATCH_ATTEMPTS):  # read, apply, write only if nobody wrote in between
        before = await store.get(USERS, user_id)
        if before is None:
            raise _missing(user_id)
        user = render.shown(UserModel, before, r.base_url, ENDPOINT)
        if not operations.patch(user, scim_policy=POLICY):
            (shown,) = await with_groups(r, [before])
            return render.one(shown)
        after = render.stamp(user, user_id, "User", render.date_of(before))
        with contextlib.suppress(Changed):
            return await _write(r, before, after, "scim.user.patched", read=before)
    raise ScimError(with_status(SCIMException(detail="The user kept changing: try again."), 409))


async def _write(
    r: ScimRequest,
    before: dict[str, Any],
    after: dict[str, Any],
    action: str,
    read: dict[str, Any] | None = None,
) -> Response:
    try:
        await r.deps.directory.store.put(
            USERS, after["id"], after, user_index_values(after), create=False, read=read
        )
    except Taken as exc:
        raise _taken(exc) from None
    except Missing:
        raise _missing(after["id"]) from None
    await r.journal().write(action, team="", before=summary(before), after=summary(after))
    (shown,) = await with_groups(r, [after])
    return render.one(shown)


async def delete(r: ScimRequest) -> Response:
    user_id = r.param("id")
    try:
        gone = await r.deps.directory.store.delete(USERS, user_id)
    except Missing:
        raise _missing(user_id) from None
    journal = r.journal()
    await journal.write("scim.user.deleted", team="", before=summary(gone), after={})
    names = [n for n in user_index_values(gone)[::2] if n]  # userName, primary email (any case)
    for binding in await r.deps.bindings.remove_user(subject=gone.get("externalId"), emails=names):
        await journal.write(
            "role.unbound",
            team=binding.team or "",
            before={"binding": binding.id, "user": binding.subject, "role": binding.role.value},
            after={},
        )
    return Response(status_code=204)
