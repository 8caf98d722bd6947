"""/scim/v2 on the admin plane (gateway/edge/planes.py): the IdP's provisioning endpoint
(RFC 7644), behind its own token (gateway/scim/http.py).

    GET                          /ServiceProviderConfig, /ResourceTypes[/{id}], /Schemas[/{id}]
    GET POST                     /Users, /Groups          (list with filter and pages; create)
    POST                         /Users/.search, /Groups/.search
    GET PUT PATCH DELETE         /Users/{id}, /Groups/{id}
    POST                         /.search                 (users then groups, no filter)
    anything else                SCIM's 404

It is one Mount, not documented in the OpenAPI document: SCIM is its own protocol, described by
its own discovery endpoints (what IdPs and scim2-tester read).
"""

from __future__ import annotations

from scim2_models import (
    Context,
    InvalidFilterException,
    ListResponse,
    NotFoundException,
    ResourceType,
    Schema,
    SearchRequest,
)
from starlette.responses import Response
from starlette.routing import Mount, Router

from gateway.scim import groups, render, users
from gateway.scim.errors import ScimError, scim_response
from gateway.scim.http import BASE_PATH, ScimRequest, not_found, route
from gateway.scim.models import CONFIG, POLICY, PROVIDER, GroupModel, UserModel
from gateway.scim.query import page_bounds
from gateway.scim.store import GROUPS, USERS


def _located(data: dict[str, object], r: ScimRequest, path: str) -> dict[str, object]:
    meta = dict(data.get("meta") or {})  # type: ignore[call-overload]
    meta["location"] = f"{r.base_url}/{path}"
    return {**data, "meta": meta}


async def service_provider_config(r: ScimRequest) -> Response:
    body = CONFIG.model_dump(scim_ctx=Context.RESOURCE_QUERY_RESPONSE, scim_policy=POLICY)
    body["meta"] = {"resourceType": "ServiceProviderConfig"}
    return scim_response(_located(body, r, "ServiceProviderConfig"))


def _resource_type(resource_type: ResourceType, r: ScimRequest) -> dict[str, object]:
    body = resource_type.model_dump(scim_ctx=Context.RESOURCE_QUERY_RESPONSE, scim_policy=POLICY)
    body["meta"] = {"resourceType": "ResourceType"}
    return _located(body, r, f"ResourceTypes/{resource_type.id}")


def _schema(schema: Schema, r: ScimRequest) -> dict[str, object]:
    body = schema.model_dump(scim_ctx=Context.RESOURCE_QUERY_RESPONSE, scim_policy=POLICY)
    body["meta"] = {"resourceType": "Schema"}
    return _located(body, r, f"Schemas/{schema.id}")


def _list(items: list[dict[str, object]]) -> Response:
    page = ListResponse[ResourceType](total_results=len(items), start_index=1, items_per_page=len(items))
    body = page.model_dump(scim_ctx=Context.SEARCH_RESPONSE)
    body["Resources"] = items
    return scim_response(body)


async def resource_types(r: ScimRequest) -> Response:
    return _list([_resource_type(t, r) for t in PROVIDER.resource_types])


async def resource_type(r: ScimRequest) -> Response:
    for t in PROVIDER.resource_types:
        if t.id == r.param("id"):
            return scim_response(_resource_type(t, r))
    raise ScimError(NotFoundException(detail="No such resource type: there are User and Group."))


async def schemas(r: ScimRequest) -> Response:
    return _list([_schema(s, r) for s in PROVIDER.schemas])


async def schema(r: ScimRequest) -> Response:
    for s in PROVIDER.schemas:
        if s.id == r.param("id"):
            return scim_response(_schema(s, r))
    raise ScimError(NotFoundException(detail="No such schema."))


async def search_everything(r: ScimRequest) -> Response:
    """POST /.search (RFC 7644 §3.4.3): users, then groups, a page at a time; a filter is the
    resource type's (its indexes differ), so it is refused here."""
    body = r.json()
    if body.get("filter"):
        raise ScimError(
            InvalidFilterException(detail="Filter on /Users/.search or /Groups/.search: not on the root.")
        )
    request = SearchRequest[UserModel | GroupModel].model_validate(
        body, scim_ctx=Context.SEARCH_REQUEST, scim_policy=POLICY
    )
    start, count = page_bounds(request)
    store = r.deps.directory.store
    people = await store.page(USERS, start, count)
    teams = await store.page(GROUPS, max(0, start - people.total), count - len(people.items))
    found = [
        *await users.with_groups(r, people.items),
        *await groups.shown_many(r, teams.items, request),
    ]
    return render.listing(UserModel | GroupModel, people.total + teams.total, start, found, request)


def scim_mount() -> Mount:
    return Mount(
        BASE_PATH,
        app=Router(
            routes=[
                route("/ServiceProviderConfig", {"GET": service_provider_config}),
                route("/ResourceTypes", {"GET": resource_types}),
                route("/ResourceTypes/{id}", {"GET": resource_type}),
                route("/Schemas", {"GET": schemas}),
                route("/Schemas/{id}", {"GET": schema}),
                route("/.search", {"POST": search_everything}),
                route("/Users", {"GET": users.search, "POST": users.create}),
                route("/Users/.search", {"POST": users.search_post}),
                route(
                    "/Users/{id}",
                    {"GET": users.read, "PUT": users.replace, "PATCH": users.patch, "DELETE": users.delete},
                ),
                route("/Groups", {"GET": groups.search, "POST": groups.create}),
                route("/Groups/.search", {"POST": groups.search_post}),
                route(
                    "/Groups/{id}",
                    {
                        "GET": groups.read,
                        "PUT": groups.replace,
                        "PATCH": groups.patch,
                        "DELETE": groups.delete,
                    },
                ),
                not_found("/{rest:path}"),
            ]
        ),
    )
