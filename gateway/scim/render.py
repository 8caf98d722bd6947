"""Stored resources in and out: stamping `id` and `meta` on a validated resource, the stored
form, and what a response shows (`meta.location` and `$ref`s from the request's base URL,
`attributes`/`excludedAttributes` applied by scim2-models)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

from scim2_models import Context, ListResponse, Meta, ResponseParameters
from starlette.responses import Response

from gateway.scim.errors import scim_response
from gateway.scim.models import POLICY


def stamp(resource: Any, resource_id: str, resource_type: str, created: Any = None) -> dict[str, Any]:
    """The stored form of a validated resource: its id and meta set, attributes never returned
    (a password) dropped, and what is derived at read time (a user's groups, a group's members,
    `meta.location`) left out."""
    now = dt.datetime.now(dt.UTC)
    resource.id = resource_id
    resource.meta = Meta(resource_type=resource_type, created=created or now, last_modified=now)
    stored: dict[str, Any] = resource.model_dump(scim_ctx=Context.RESOURCE_QUERY_RESPONSE, scim_policy=POLICY)
    for derived in ("groups", "members"):
        stored.pop(derived, None)
    stored["meta"].pop("location", None)
    return stored


def shown(model: Any, stored: dict[str, Any], base_url: str, endpoint: str) -> Any:
    """A stored resource (with what is derived at read time already added) as its model, with
    its location."""
    data = {**stored, "meta": {**stored.get("meta", {}), "location": f"{base_url}/{endpoint}/{stored['id']}"}}
    return model.model_validate(data, scim_ctx=Context.RESOURCE_QUERY_RESPONSE, scim_policy=POLICY)


def one(
    resource: Any,
    status: int = 200,
    params: ResponseParameters[Any] | None = None,
    context: Context = Context.RESOURCE_QUERY_RESPONSE,
) -> Response:
    body = resource.model_dump(scim_ctx=context, response_parameters=params, scim_policy=POLICY)
    headers = {"location": body["meta"]["location"]} if status == 201 else None
    return scim_response(body, status, headers=headers)


def listing(
    model: Any, total: int, start: int, resources: Sequence[Any], params: ResponseParameters[Any] | None
) -> Response:
    page = ListResponse[model](
        total_results=total, start_index=start + 1, items_per_page=len(resources), resources=list(resources)
    )
    return scim_response(
        page.model_dump(scim_ctx=Context.SEARCH_RESPONSE, response_parameters=params, scim_policy=POLICY)
    )


def date_of(stored: dict[str, Any]) -> Any:
    """When a stored resource was created, kept across a replace."""
    return (stored.get("meta") or {}).get("created")
