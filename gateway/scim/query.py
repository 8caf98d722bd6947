"""Reading a SCIM request's query (`filter`, `startIndex`, `count`, `attributes`,
`excludedAttributes`) and answering a filter from the directory's indexes.

A filter is parsed and checked by scim2-models (SearchRequest: its syntax, and attributes the
resource type does not declare are invalidFilter). The store answers one from an index only: an
`eq` on an indexed attribute (userName, externalId or id of a user; displayName or id of a
group), alone or joined by `and` with anything else, which is then checked on the one candidate.
That is every filter Okta and Entra ID send (`userName eq`, `externalId eq`, `displayName eq`,
Entra's `id eq ... and members eq ...`). Any other filter would need every resource read to
answer it, so it is refused with invalidFilter rather than answered by a scan.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

from scim2_models import (
    Context,
    InvalidFilterException,
    ResponseParameters,
    ScimFilter,
    SearchRequest,
)
from scim2_models.path import AttrPath, CompareOperator, Comparison, LogicalExpr, LogicalOperator

from gateway.scim.errors import ScimError
from gateway.scim.models import MAX_RESULTS, POLICY
from gateway.scim.store import USERS, Kind

_CORE = ("urn:ietf:params:scim:schemas:core:2.0:user", "urn:ietf:params:scim:schemas:core:2.0:group")
# attribute (lower-cased) -> (store index, whether values are case-insensitive); "id" is no index.
_INDEXED: dict[str, dict[str, tuple[str, bool]]] = {
    "users": {"username": ("userName", True), "externalid": ("externalId", False), "id": ("id", False)},
    "groups": {"displayname": ("displayName", True), "id": ("id", False)},
}


def search_request(model: Any, query: Mapping[str, str]) -> SearchRequest[Any]:
    """The query string as a SearchRequest, checked against `model` (ValidationError: the
    endpoint wrapper answers it in SCIM's envelope)."""
    data: dict[str, Any] = {}
    for name in ("filter", "attributes", "excludedAttributes"):
        if query.get(name):
            data[name] = query[name]
    for name in ("startIndex", "count"):
        if name in query:
            data[name] = query[name]
    request: SearchRequest[Any] = SearchRequest[model].model_validate(
        data, scim_ctx=Context.SEARCH_REQUEST, scim_policy=POLICY
    )
    return request


def response_parameters(model: Any, query: Mapping[str, str]) -> ResponseParameters[Any]:
    data = {name: query[name] for name in ("attributes", "excludedAttributes") if query.get(name)}
    params: ResponseParameters[Any] = ResponseParameters[model].model_validate(data)
    return params


def page_bounds(request: SearchRequest[Any]) -> tuple[int, int]:
    """(0-based start, count): startIndex below 1 is 1 and count is at most MAX_RESULTS (RFC 7644
    §3.4.2.4 lets a server answer fewer than asked)."""
    start = max(1, request.start_index or 1) - 1
    count = MAX_RESULTS if request.count is None else max(0, min(request.count, MAX_RESULTS))
    return start, count


def indexed_lookup(kind: Kind, scim_filter: ScimFilter[Any]) -> tuple[str, str]:
    """(index, value) of the filter's indexed `eq`; ScimError invalidFilter when it has none."""
    node = scim_filter.ast
    terms = node.terms if isinstance(node, LogicalExpr) and node.op is LogicalOperator.and_ else (node,)
    for term in terms:
        if not isinstance(term, Comparison) or term.op is not CompareOperator.eq:
            continue
        found = _indexed(kind, term.attr_path)
        if found is not None and isinstance(term.value, str):
            index, folded = found
            return index, term.value.lower() if folded else term.value
    names = " or ".join(name for name, _ in _INDEXED[kind.name].values())
    raise ScimError(
        InvalidFilterException(
            detail=f"Filters on {'Users' if kind is USERS else 'Groups'} need an `eq` on {names} "
            "(alone, or joined with `and`)."
        )
    )


def _indexed(kind: Kind, path: AttrPath) -> tuple[str, bool] | None:
    if path.sub_attr is not None or (path.uri is not None and path.uri.lower() not in _CORE):
        return None
    return _INDEXED[kind.name].get(path.attr.lower())


def now_iso() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
