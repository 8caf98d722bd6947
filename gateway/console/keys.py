"""A team's keys: list (active, revoked, expired), create, edit, rotate, revoke.

A new secret (create, rotate) is shown once: it waits in Redis under a random id for at most
FLASH_TTL_S, bound to the session that made it, and the page that shows it takes it with GETDEL
behind a redirect, so a reload, the back button or another browser find nothing. The Redis key
holds the session id too: another session that learns the id (from a log line, a history) finds
nothing there and cannot take it away from the session it belongs to.
"""

from __future__ import annotations

import datetime as dt
import secrets
import time
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from gateway.admin import validation
from gateway.admin.bounds import within_team
from gateway.console import snippets
from gateway.console.forms import KEY_FIELDS, Form, FormErrors, model_limit_rows, whole_number
from gateway.console.teams import limits_body, notice, served_models
from gateway.console.web import Console, Page, redirect
from gateway.errors import ErrorCode, GatewayError
from gateway.identity.roles import Action
from gateway.keys.record import KeyNotFoundError, KeyRecord
from gateway.limits.spec import LimitSet, parse_limits
from gateway.routing.share import PRIORITY_DEFAULT

FLASH_TTL_S = 120
_MAX_NAME = 200
_MAX_GRACE_S = 90 * 86400
_FILTERS = ("active", "expired", "revoked", "all")
_NOTICES = {"revoked": "Key revoked.", "updated": "Key saved."}


def _status(record: KeyRecord, now: float) -> str:
    if record.revoked:
        return "revoked"
    if record.expires_at is not None and record.expires_at <= now:
        return "expired"
    return "active"


async def _team_priority(page: Page, team: str) -> int:
    """The team's priority band: a key's own is capped at it (gateway/routing/share.py)."""
    limits = await page.deps.keystore.team_limits(team)
    own = limits.priority if limits is not None else None
    return own or PRIORITY_DEFAULT


async def _key(page: Page, request: Request, action: Action) -> KeyRecord:
    """The key a page is about, once the caller may do `action` on it: a key of a team they may
    not read is a 404, as on the admin API."""
    record = await page.deps.keystore.key(request.path_params["key_id"])
    if not page.caller.permissions.allows(Action.READ_KEYS, record.team):
        raise KeyNotFoundError(record.id)
    page.require(action, record.team)
    return record


async def _within_team(page: Page, limits: LimitSet, team: str) -> None:
    """A team admin's key stays within its team's limits (gateway/admin/bounds.py)."""
    if page.caller.permissions.platform_admin:
        return
    team_limits = await page.deps.keystore.team_limits(team)
    within_team(limits, team_limits or LimitSet(), team)


def _models(form: Form, page: Page) -> list[str] | None:
    """Ticked models; none ticked is every model."""
    known = {name for route in page.deps.router.models() for name in (route.model.name, *route.model.aliases)}
    return validation.model_names(form.getlist("models") or None, known=known)


def _expiry(form: Form) -> float | None:
    return validation.expiry(form.get("expires_at").strip() or None)


def _key_name(form: Form) -> str:
    name = form.get("name")
    if len(name) > _MAX_NAME:
        raise GatewayError(
            ErrorCode.INVALID_REQUEST, f"'name' must be at most {_MAX_NAME} characters.", param="name"
        )
    return name


def _flash_key(page: Page, flash_id: str) -> str:
    return f"{page.session.id}.{flash_id}"


class Keys:
    def __init__(self, console: Console) -> None:
        self._console = console

    async def _flash(self, page: Page, record: KeyRecord, secret: str) -> str:
        flash_id = secrets.token_urlsafe(18)
        models = None if record.models is None else sorted(record.models)
        value = orjson.dumps(
            {"session": page.session.id, "key_id": record.id, "secret": secret, "models": models}
        )
        await page.store.put_flash(_flash_key(page, flash_id), value, FLASH_TTL_S)
        return flash_id

    async def _take_flash(self, page: Page, flash_id: str) -> dict[str, Any] | None:
        if not flash_id or len(flash_id) > 64:
            return None
        raw = await page.store.take_flash(_flash_key(page, flash_id))
        if raw is None:
            return None
        value: dict[str, Any] = orjson.loads(raw)
        return value if value.get("session") == page.session.id else None

    async def _context(self, request: Request, page: Page, team: str) -> dict[str, Any]:
        await page.deps.keystore.team(team)  # 404 page for a team that does not exist
        wanted = request.query_params.get("status", "active")
        wanted = wanted if wanted in _FILTERS else "active"
        now = time.time()
        keys = [{"record": k, "status": _status(k, now)} for k in await page.deps.keystore.list_keys(team)]
        shown = [k for k in keys if wanted == "all" or k["status"] == wanted]
        return {
            "team": team,
            "keys": shown,
            "status": wanted,
            "filters": _FILTERS,
            "fields": KEY_FIELDS,
            "models": served_models(page),
            "form": {},
            "model_rows": model_limit_rows(served_models(page), None),
            "team_priority": await _team_priority(page, team),
            "picked": [],
            "flash": None,
            "notice": None,
        }

    async def index(self, request: Request, page: Page) -> Response:
        team = validation.team_name(request.path_params["team"])
        page.require(Action.READ_KEYS, team)
        context = await self._context(request, page, team)
        if request.method == "GET":  # a HEAD shows nothing: it must not use the secret's one showing up
            flash = await self._take_flash(page, request.query_params.get("flash", ""))
            if flash is not None:
                base, router = self._console.client_base(request), page.deps.router
                flash["agents"] = snippets.for_key(router, base, flash["secret"], flash.get("models"))
            context["flash"] = flash
        context["notice"] = notice(request, _NOTICES)
        return self._console.render(request, "keys.html", context, session=page.session)

    async def create(self, request: Request, page: Page) -> Response:
        team = validation.team_name(request.path_params["team"])
        page.require(Action.MANAGE_KEYS, team)
        form = page.form
        try:
            errors = FormErrors()
            name = errors.check(lambda: _key_name(form))
            models = errors.check(lambda: _models(form, page))
            expires_at = errors.check(lambda: _expiry(form))
            body, _ = limits_body(form, KEY_FIELDS, page, None, errors)
            errors.raise_any()
            limits = parse_limits(body, budgets=False)
            await _within_team(page, limits, team)
            record, secret = await page.deps.keystore.create_key(
                team,
                name=name or "",
                models=models,
                limits=limits,
                expires_at=expires_at,
                journal=(journal := page.journal(request)),
                created_by=journal.actor,
            )
        except GatewayError as exc:
            context = await self._context(request, page, team)
            context.update(
                error=exc.message,
                form=form.values(),
                picked=form.getlist("models"),
                model_rows=model_limit_rows(served_models(page), None, form),
            )
            return self._console.render(
                request, "keys.html", context, session=page.session, status=exc.status
            )
        flash_id = await self._flash(page, record, secret)
        return redirect(f"/teams/{team}/keys?flash={flash_id}")

    async def _edit_context(self, page: Page, record: KeyRecord, sent: Form | None = None) -> dict[str, Any]:
        limits = record.limits.as_dict()
        form = {field: str(limits.get(field, "")) for field in KEY_FIELDS}
        form["tpm_counts"] = str(limits.get("tpm_counts", "total"))
        if record.expires_at is not None:
            when = dt.datetime.fromtimestamp(record.expires_at, dt.UTC)
            form["expires_at"] = when.strftime("%Y-%m-%dT%H:%M")
        picked = sorted(record.models) if record.models is not None else []
        if sent is not None:
            form, picked = sent.values(), sent.getlist("models")
        return {
            "key": record,
            "status": _status(record, time.time()),
            "fields": KEY_FIELDS,
            "models": served_models(page),
            "picked": picked,
            "form": form,
            "model_rows": model_limit_rows(served_models(page), record.limits, sent),
            "team_priority": await _team_priority(page, record.team),
            "notice": None,
        }

    async def show(self, request: Request, page: Page) -> Response:
        record = await _key(page, request, Action.READ_KEYS)
        context = await self._edit_context(page, record)
        context["notice"] = notice(request, _NOTICES)
        return self._console.render(request, "key.html", context, session=page.session)

    async def update(self, request: Request, page: Page) -> Response:
        record = await _key(page, request, Action.MANAGE_KEYS)
        form = page.form
        try:
            errors = FormErrors()
            models = errors.check(lambda: _models(form, page))
            expires_at = errors.check(lambda: _expiry(form))
            body, blank = limits_body(form, KEY_FIELDS, page, record.limits, errors)
            errors.raise_any()
            changes, cleared = validation.limit_changes({**body, "clear": blank}, budgets=False)
            await _within_team(page, changes, record.team)
            updated = await page.deps.keystore.update_key(
                record.id,
                changes,
                cleared,
                models=models,
                expires_at=expires_at,
                journal=page.journal(request),
            )
        except GatewayError as exc:
            context = await self._edit_context(page, record, form)
            context["error"] = exc.message
            return self._console.render(request, "key.html", context, session=page.session, status=exc.status)
        return redirect(f"/keys/{updated.id}?done=updated")

    async def rotate(self, request: Request, page: Page) -> Response:
        record = await _key(page, request, Action.MANAGE_KEYS)
        grace = whole_number(page.form, "grace_seconds") or 0
        if grace > _MAX_GRACE_S:
            raise GatewayError(
                ErrorCode.INVALID_REQUEST,
                "'grace_seconds' must be a number of seconds from 0 to 90 days.",
                param="grace_seconds",
            )
        record, secret = await page.deps.keystore.rotate(
            record.id, float(grace), journal=page.journal(request)
        )
        flash_id = await self._flash(page, record, secret)
        return redirect(f"/teams/{record.team}/keys?flash={flash_id}")

    async def revoke(self, request: Request, page: Page) -> Response:
        await _key(page, request, Action.MANAGE_KEYS)
        record = await page.deps.keys.revoke(request.path_params["key_id"], journal=page.journal(request))
        return redirect(f"/teams/{record.team}/keys?status=all&done=revoked")
