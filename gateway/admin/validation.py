"""Checks on admin request values, shared by the admin JSON API and the web console: each returns
the clean value or raises a GatewayError (a 400 in the API's envelope) naming the parameter."""

from __future__ import annotations

import contextlib
import datetime as dt
import math
import time
from collections.abc import Collection
from typing import Any

from gateway.errors import ErrorCode, GatewayError
from gateway.keys.store import TEAM_NAME_RE
from gateway.limits.spec import LimitSet, parse_limits
from gateway.model_table import MODEL_NAME_RE


def team_name(value: Any, param: str = "team") -> str:
    if not isinstance(value, str) or not TEAM_NAME_RE.fullmatch(value):
        raise GatewayError(
            ErrorCode.INVALID_REQUEST,
            f"'{param}' must be 1-63 characters of lowercase letters, digits, '-' and '_', "
            "starting with a letter or digit.",
            param=param,
        )
    return value


def expiry(value: Any, param: str = "expires_at") -> float | None:
    """Unix seconds, or an ISO 8601 date or time (UTC unless it says otherwise), in the future: a
    time already past would only make a key that never works. None stays None (no expiry)."""
    if value is None:
        return None
    when: float | None = None
    if isinstance(value, int | float) and not isinstance(value, bool):
        when = float(value)
    elif isinstance(value, str):
        with contextlib.suppress(ValueError, OverflowError):
            parsed = dt.datetime.fromisoformat(value)
            when = (parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)).timestamp()
    if when is None or not math.isfinite(when):
        raise GatewayError(
            ErrorCode.INVALID_REQUEST,
            f"'{param}' must be Unix seconds or an ISO 8601 date/time such as 2026-12-31T00:00:00Z.",
            param=param,
        )
    if when <= time.time():
        raise GatewayError(
            ErrorCode.INVALID_REQUEST,
            f"'{param}' is in the past: a key must expire in the future.",
            param=param,
        )
    return when


def model_names(value: Any, param: str = "models", known: Collection[str] | None = None) -> list[str] | None:
    """None (every model) or a non-empty list of model names; with `known` (the router's names and
    aliases), each must be one of them: a key for a model the gateway does not serve is a typo."""
    if value is None:
        return None
    if (
        not isinstance(value, list)
        or not value
        or not all(isinstance(m, str) and MODEL_NAME_RE.fullmatch(m) for m in value)
    ):
        raise GatewayError(
            ErrorCode.INVALID_REQUEST,
            f"'{param}' must be a non-empty list of model names.",
            param=param,
        )
    if known is not None:
        unknown = sorted({m for m in value if m not in known})
        if unknown:
            # 400, not 404: the path exists, a value in the body is wrong.
            raise GatewayError(
                ErrorCode.INVALID_REQUEST,
                f"'{param}' names models this gateway does not serve: {', '.join(unknown)}.",
                param=param,
            )
    return list(dict.fromkeys(value))


def limit_changes(body: dict[str, Any], *, budgets: bool) -> tuple[LimitSet, set[str]]:
    """New limit values, and the names to remove: `{"clear": ["tpm", ...]}`."""
    cleared = body.get("clear", [])
    if not isinstance(cleared, list) or not all(isinstance(c, str) for c in cleared):
        raise GatewayError(ErrorCode.INVALID_REQUEST, "'clear' must be a list of limit names.", param="clear")
    return parse_limits(body, budgets=budgets), set(cleared)


def query_date(value: str | None, param: str) -> dt.date | None:
    """A `since`/`until` query parameter: YYYY-MM-DD, or None when absent or blank."""
    value = (value or "").strip()
    if not value:
        return None
    try:
        return dt.date.fromisoformat(value)
    except ValueError:
        raise GatewayError(
            ErrorCode.INVALID_REQUEST, f"'{param}' must be a date as YYYY-MM-DD.", param=param
        ) from None
