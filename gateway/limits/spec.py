"""What a team or a key is allowed: request, token and concurrency limits (optionally per model)
and, for teams and keys, daily and monthly token and money budgets. Stored as one JSON field on the
team or key record; a money budget is an exact decimal string there and in the admin API, and
nano-units (10^-9 of the model table's currency, gateway/pricing.py) in here.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from gateway.errors import ErrorCode, GatewayError
from gateway.pricing import MAX_NANO, NANO_PER_UNIT, amount, from_nano


class TokenCount(enum.StrEnum):
    """Which tokens a TPM limit counts."""

    TOTAL = "total"
    INPUT = "input"
    OUTPUT = "output"


TOKEN_COUNTS = tuple(TokenCount)
_RATE_FIELDS = ("rpm", "tpm", "max_concurrency")
# Team-only fields: budgets, and the team's weight in a saturated pool's fair queue (default 1).
_BUDGET_FIELDS = ("daily_tokens", "monthly_tokens", "weight")
# A key may have token budgets of its own (inside its team's), but no weight: the fair queue is
# between teams. Per-model limits have neither.
_KEY_BUDGET_FIELDS = ("daily_tokens", "monthly_tokens")
# Money budgets, teams and keys: decimal strings outside, nano-units inside.
COST_FIELDS = ("daily_cost", "monthly_cost")
_COST_DECIMALS = 9  # a nano-unit
# Teams and keys, not per model; each with a range of its own (checked by _priority, _deadline).
_SHARE_FIELDS = ("priority", "default_deadline_ms", "overflow")
PRIORITY_RANGE = (1, 9)
_DECIMAL_RE = re.compile(r"[0-9]{1,16}(\.[0-9]+)?")  # no sign, no exponent: "12", "0.5", "12.50"
# The Files and Batch API (gateway/batch/, docs/batch.md): a team's batch lines not yet done, all
# batches together, and its lines running at once on every replica; a key's `batches: false`
# denies it the API.
_BATCH_FIELDS = ("max_batch_lines", "batch_max_inflight")
# Whether requests may go to a model's external overflow providers (docs/overflow.md): a team
# allows it, a key may deny it for itself; absent, denied.
OVERFLOW_ALLOWED, OVERFLOW_DENIED = "allowed", "denied"
OVERFLOW_CHOICES = (OVERFLOW_ALLOWED, OVERFLOW_DENIED)
MAX_DEADLINE_MS = 86_400_000  # a day: more is a mistake, not a deadline (gateway/routing/deadline.py)


@dataclass(frozen=True, slots=True)
class LimitSet:
    rpm: int | None = None
    tpm: int | None = None
    max_concurrency: int | None = None
    tpm_counts: TokenCount = TokenCount.TOTAL
    daily_tokens: int | None = None  # teams and keys (not per model), UTC calendar day
    monthly_tokens: int | None = None  # teams and keys (not per model), UTC calendar month
    daily_cost: int | None = None  # teams and keys: nano-units a UTC day (gateway/pricing.py)
    monthly_cost: int | None = None  # teams and keys: nano-units a UTC calendar month
    weight: int | None = None  # teams only: share of a saturated pool relative to other teams
    # Teams and keys (not per model): the priority band in a saturated pool, 1 (lowest) to 9,
    # default 5; a higher band is served first (gateway/routing/share.py).
    priority: int | None = None
    # Teams and keys (not per model): the deadline for the first token of a request that sends
    # none (x-sluicegate-deadline-ms); a key's overrides its team's (gateway/routing/deadline.py).
    default_deadline_ms: int | None = None
    max_batch_lines: int | None = None  # teams only
    batch_max_inflight: int | None = None  # teams only
    batches: bool | None = None  # teams and keys: False denies the Files and Batch API
    # Teams and keys (not per model): "allowed" or "denied"; a team's default is denied, and a
    # key's "denied" refuses it for that key whatever its team says (gateway/overflow/).
    overflow: str | None = None
    per_model: Mapping[str, LimitSet] = field(default_factory=dict)

    @property
    def share_weight(self) -> int:
        return self.weight or 1

    @property
    def empty(self) -> bool:
        return self == NO_LIMITS

    def for_model(self, model: str) -> LimitSet | None:
        return self.per_model.get(model)

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            name: getattr(self, name)
            for name in (*_RATE_FIELDS, *_BUDGET_FIELDS, *_SHARE_FIELDS, *_BATCH_FIELDS)
            if getattr(self, name)
        }
        if self.batches is not None:
            out["batches"] = self.batches
        for name in COST_FIELDS:
            nano = getattr(self, name)
            if nano:
                out[name] = amount(from_nano(nano))
        if self.tpm is not None and self.tpm_counts != "total":
            out["tpm_counts"] = self.tpm_counts
        if self.per_model:
            out["model_limits"] = {name: limits.as_dict() for name, limits in sorted(self.per_model.items())}
        return out

    def to_json(self) -> bytes:
        return orjson.dumps(self.as_dict())

    @classmethod
    def from_json(cls, raw: bytes | str | None) -> LimitSet:
        return parse_limits(orjson.loads(raw), budgets=True) if raw else NO_LIMITS

    def merged(self, changes: LimitSet, cleared: set[str]) -> LimitSet:
        """These limits with `changes` applied; names in `cleared` are removed."""
        names = (*_RATE_FIELDS, *_BUDGET_FIELDS, *COST_FIELDS, *_SHARE_FIELDS, *_BATCH_FIELDS, "batches")
        values = {name: getattr(self, name) for name in (*names, "tpm_counts")}
        for name in names:
            if getattr(changes, name) is not None:
                values[name] = getattr(changes, name)
            if name in cleared:
                values[name] = None
        if changes.tpm is not None:
            values["tpm_counts"] = changes.tpm_counts
        # `model_limits` in `cleared` removes every model's limits, `model_limits.<model>` one's.
        per_model = {
            model: limits
            for model, limits in {**self.per_model, **changes.per_model}.items()
            if "model_limits" not in cleared and f"model_limits.{model}" not in cleared
        }
        return LimitSet(**values, per_model=per_model)


NO_LIMITS = LimitSet()


# Limits are counted in Lua numbers (doubles): past 2^53 they stop being exact integers.
MAX_LIMIT = 2**53


def _positive_int(value: Any, param: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_LIMIT:
        raise GatewayError(
            ErrorCode.INVALID_REQUEST, f"'{param}' must be an integer from 1 to 2^53.", param=param
        )
    return value


def _cost(value: Any, param: str) -> int:
    """A money budget: a decimal string of the currency, more than zero, at most nine decimal
    places (a nano-unit), below 2^53 nano-units (admit.lua adds them up as Lua numbers)."""
    why = (
        f"'{param}' must be an amount of money as a decimal string such as \"12.50\", more than 0 "
        f"and at most {amount(from_nano(MAX_NANO))}, with at most {_COST_DECIMALS} decimal places."
    )
    if not isinstance(value, str) or not _DECIMAL_RE.fullmatch(value.strip()):
        raise GatewayError(ErrorCode.INVALID_REQUEST, why, param=param)
    whole, _, fraction = value.strip().partition(".")
    if len(fraction) > _COST_DECIMALS:
        raise GatewayError(ErrorCode.INVALID_REQUEST, why, param=param)
    nano = int(whole) * NANO_PER_UNIT + int(fraction.ljust(_COST_DECIMALS, "0") or 0)
    if not 1 <= nano <= MAX_NANO:
        raise GatewayError(ErrorCode.INVALID_REQUEST, why, param=param)
    return nano


def _priority(value: Any) -> int:
    low, high = PRIORITY_RANGE
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        why = f"'priority' must be an integer from {low} to {high}."
        raise GatewayError(ErrorCode.INVALID_REQUEST, why, param="priority")
    return value


def _deadline(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_DEADLINE_MS:
        why = f"'default_deadline_ms' must be a whole number of milliseconds from 1 to {MAX_DEADLINE_MS}."
        raise GatewayError(ErrorCode.INVALID_REQUEST, why, param="default_deadline_ms")
    return value


def _overflow(value: Any) -> str:
    if value not in OVERFLOW_CHOICES:
        why = f"'overflow' must be one of {', '.join(OVERFLOW_CHOICES)}."
        raise GatewayError(ErrorCode.INVALID_REQUEST, why, param="overflow")
    return str(value)


def overflow_allowed(team: LimitSet, key: LimitSet) -> bool:
    """Whether a request of this key may be served by an overflow provider."""
    return team.overflow == OVERFLOW_ALLOWED and key.overflow != OVERFLOW_DENIED


def parse_limits(body: Mapping[str, Any], *, budgets: bool, where: str = "") -> LimitSet:
    """The limit fields of an admin request body (unknown fields are the caller's business):
    `budgets` for a team's (budgets and weight); otherwise a key's (budgets), or with `where` a
    model's (neither)."""
    values: dict[str, Any] = {}
    extra = _BUDGET_FIELDS if budgets else () if where else _KEY_BUDGET_FIELDS
    for name in (*_RATE_FIELDS, *extra):
        if body.get(name) is not None:
            values[name] = _positive_int(body[name], where + name)
    if not where:  # teams and keys, not per model
        for name in COST_FIELDS:
            if body.get(name) is not None:
                values[name] = _cost(body[name], name)
    if not where and body.get("priority") is not None:
        values["priority"] = _priority(body["priority"])
    if budgets:
        for name in _BATCH_FIELDS:
            if body.get(name) is not None:
                values[name] = _positive_int(body[name], name)
    if not where and body.get("batches") is not None:
        if not isinstance(body["batches"], bool):
            raise GatewayError(ErrorCode.INVALID_REQUEST, "'batches' must be true or false.", param="batches")
        values["batches"] = body["batches"]
    if not where and body.get("default_deadline_ms") is not None:
        values["default_deadline_ms"] = _deadline(body["default_deadline_ms"])
    if not where and body.get("overflow") is not None:
        values["overflow"] = _overflow(body["overflow"])
    counts = body.get("tpm_counts", "total")
    if counts not in TOKEN_COUNTS:
        raise GatewayError(
            ErrorCode.INVALID_REQUEST,
            f"'{where}tpm_counts' must be one of {', '.join(TOKEN_COUNTS)}.",
            param=where + "tpm_counts",
        )
    per_model: dict[str, LimitSet] = {}
    models = body.get("model_limits") if not where else None
    if models is not None and not isinstance(models, dict):
        raise GatewayError(
            ErrorCode.INVALID_REQUEST,
            "'model_limits' must map model names to limits.",
            param="model_limits",
        )
    for model, raw in (models or {}).items():
        if not isinstance(raw, dict):
            raise GatewayError(
                ErrorCode.INVALID_REQUEST,
                f"'model_limits.{model}' must be an object of limits.",
                param=f"model_limits.{model}",
            )
        per_model[str(model)] = parse_limits(raw, budgets=False, where=f"model_limits.{model}.")
    return LimitSet(**values, tpm_counts=TokenCount(counts), per_model=per_model)
