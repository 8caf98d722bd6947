"""Role bindings and `me`: who holds which role, and who the caller is.

    POST   /admin/v1/role-bindings        {"group" | "user", "role", "team"}: 201 the binding, or
                                          200 the one already there for the same subject, role
                                          and team
    GET    /admin/v1/role-bindings        ?team= ?role=
    DELETE /admin/v1/role-bindings/{id}
    GET    /admin/v1/me                   the caller and their effective roles: any signed-in
                                          caller, roles or not
    GET    /admin/v1/oidc                 public: the issuer and the CLI's client id, for
                                          `sluicegate login`

Binding and unbinding are a platform admin's; reading the bindings, a platform admin's or an
auditor's. Both changes are audited like any other.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from gateway.admin.access import Caller, bound_team_ids
from gateway.admin.audit import RequestJournal
from gateway.admin.deps import AdminDeps
from gateway.admin.guard import journal, json_body, json_response, route
from gateway.admin.validation import team_name
from gateway.errors import ErrorCode, GatewayError
from gateway.identity.bindings import (
    BINDING_ID_RE,
    MAX_BINDINGS,
    MAX_SUBJECT_CHARS,
    RoleBinding,
    Subject,
    TooManyBindings,
)
from gateway.identity.roles import Action, Role

_ROLES = ", ".join(r.value for r in Role)


def _invalid(message: str, param: str) -> GatewayError:
    return GatewayError(ErrorCode.INVALID_REQUEST, message, param=param)


def _subject(body: dict[str, Any]) -> tuple[Subject, str]:
    given = [kind for kind in Subject if kind.value in body]
    if len(given) != 1:
        raise _invalid("Give exactly one of 'group' or 'user'.", "group")
    kind = given[0]
    value = body[kind.value]
    if (
        not isinstance(value, str)
        or not value.strip()
        or len(value) > MAX_SUBJECT_CHARS
        or not value.isprintable()
    ):
        raise _invalid(
            f"'{kind.value}' must be a non-empty string of at most {MAX_SUBJECT_CHARS} printable characters.",
            kind.value,
        )
    return kind, value


def _role(value: Any) -> Role:
    try:
        return Role(value)
    except ValueError:
        raise _invalid(f"'role' must be one of {_ROLES}.", "role") from None


async def new_binding(
    body: dict[str, Any], deps: AdminDeps, journal: RequestJournal, actor: dict[str, Any]
) -> tuple[RoleBinding, bool]:
    """A binding from a request's fields, checked and stored (and audited); and whether it was
    there already. Shared by the admin API and the console's Roles page."""
    kind, subject = _subject(body)
    role = _role(body.get("role"))
    team = body.get("team")
    team_id = None
    if role.per_team:
        if team is None:
            raise _invalid(f"The {role.value} role is given on a team: 'team' is required.", "team")
        team = team_name(team, "team")
        info = await deps.keystore.team_info(team)
        if info is None:
            raise _invalid(f"The team '{team}' does not exist.", "team")
        team_id = info.id
    elif team is not None:
        raise _invalid(f"The {role.value} role is not given on a team: leave 'team' out.", "team")
    binding = RoleBinding.new(kind, subject, role, team, team_id, actor)
    try:
        existing = await deps.bindings.add(binding)
    except TooManyBindings:
        raise _invalid(
            f"There are {MAX_BINDINGS} role bindings already: remove some first.", "role"
        ) from None
    if existing is not None:
        return existing, True
    await journal.write("role.bound", team=team or "", before={}, after=binding.audited())
    return binding, False


async def create_binding(request: Request, deps: AdminDeps) -> Response:
    caller = Caller.of(request.scope)
    binding, existed = await new_binding(
        await json_body(request), deps, journal(request, deps), caller.principal.actor()
    )
    return json_response(binding.public(active=True), 200 if existed else 201)


async def list_bindings(request: Request, deps: AdminDeps) -> Response:
    query = request.query_params
    team = team_name(query["team"], "team") if query.get("team") else None
    role = _role(query["role"]) if "role" in query else None
    bindings = [
        b
        for b in await deps.bindings.all()
        if (team is None or b.team == team) and (role is None or b.role is role)
    ]
    ids = await bound_team_ids(deps.keystore, bindings)
    data = [b.public(active=b.active(ids)) for b in bindings]
    return json_response({"object": "list", "data": data})


async def delete_binding(request: Request, deps: AdminDeps) -> Response:
    binding_id = request.path_params["binding_id"]
    if not BINDING_ID_RE.fullmatch(binding_id):
        raise GatewayError(
            ErrorCode.NOT_FOUND, "No role binding has that id: ids look like rb_0123456789abcdef."
        )
    removed = await deps.bindings.remove(binding_id)
    if removed is None:
        raise GatewayError(ErrorCode.NOT_FOUND, f"No role binding has the id '{binding_id}'.")
    await journal(request, deps).write(
        "role.unbound", team=removed.team or "", before=removed.audited(), after={}
    )
    return json_response({**removed.public(active=False), "deleted": True})


async def me(request: Request, deps: AdminDeps) -> Response:
    caller = Caller.of(request.scope)
    principal = caller.principal
    return json_response(
        {
            "kind": principal.kind.value,
            "subject": principal.subject,
            "email": principal.email,
            "name": principal.name,
            "issuer": principal.issuer,
            "client_id": principal.client_id,
            "groups": sorted(principal.all_groups),
            "roles": [g.as_dict() for g in caller.permissions.grants],
        }
    )


async def oidc_info(request: Request) -> Response:
    """Public: which IdP and public client `sluicegate login` uses, so a person needs only the
    gateway's URL. Nothing here is a secret (the IdP publishes its issuer; the CLI's client is
    public by design)."""
    settings = AdminDeps.of(request.scope).settings
    oidc = settings.oidc
    return json_response(
        {
            "issuer": oidc.issuer if oidc else None,
            "cli_client_id": settings.oidc_cli_client_id if oidc else None,
            "audience": oidc.audience if oidc else None,
        }
    )


def role_routes() -> list[Route]:
    return [
        Route("/admin/v1/oidc", oidc_info, methods=["GET"]),
        route(
            "/admin/v1/role-bindings",
            {"POST": (create_binding, Action.ADMINISTER), "GET": (list_bindings, Action.READ_PLATFORM)},
        ),
        route("/admin/v1/role-bindings/{binding_id}", {"DELETE": (delete_binding, Action.ADMINISTER)}),
        route("/admin/v1/me", {"GET": (me, None)}),
    ]
