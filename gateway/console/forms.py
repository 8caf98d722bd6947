"""Console forms: urlencoded bodies parsed here, bounded (no multipart, no python-multipart), and
turned into the same values the admin API takes, so gateway/admin/validation.py and
gateway/limits/spec.py judge them with one set of rules."""

from __future__ import annotations

import urllib.parse
from collections.abc import Callable, Collection, Iterable
from typing import Any, TypeVar

from starlette.requests import Request

from gateway.errors import ErrorCode, GatewayError
from gateway.http.body import read_body
from gateway.limits.spec import COST_FIELDS, LimitSet, parse_limits

MAX_FORM_BYTES = 16 * 1024
# A limits form has four fields per model (model_limit_rows): room for a few hundred models.
_MAX_FIELDS = 1000
_FORM_TYPE = "application/x-www-form-urlencoded"
# The limit fields each form shows: a team's and a key's (gateway/limits/spec.py decides).
TEAM_FIELDS = (
    "rpm",
    "tpm",
    "max_concurrency",
    "daily_tokens",
    "monthly_tokens",
    "daily_cost",
    "monthly_cost",
    "weight",
    "priority",
    "default_deadline_ms",
)
# A key's are its team's but the weight: the fair queue is between teams.
KEY_FIELDS = tuple(field for field in TEAM_FIELDS if field != "weight")
# A model's own limits (`model_limits` in the admin API, `--model-limit` in the CLI), each sent as
# `model_limits.<model>.<field>`: a model's name may hold dots, never after its last one.
MODEL_FIELDS = ("rpm", "tpm", "max_concurrency")
_MODEL_PREFIX = "model_limits."
T = TypeVar("T")


class FormErrors:
    """Every invalid field of one sending, so the page says all that is wrong at once (the admin
    API's rules judge each field; a form stopped at the first would be sent once per mistake)."""

    def __init__(self) -> None:
        self._found: list[GatewayError] = []

    def check(self, judge: Callable[[], T]) -> T | None:
        """`judge()`'s value, or None when it refuses the input (noted; other errors propagate)."""
        try:
            return judge()
        except GatewayError as exc:
            if exc.code is not ErrorCode.INVALID_REQUEST:
                raise
            self._found.append(exc)
            return None

    def raise_any(self) -> None:
        """One 400 naming every problem found, one per line (the page shows them as a list)."""
        if self._found:
            message = "\n".join(dict.fromkeys(e.message for e in self._found))
            raise GatewayError(ErrorCode.INVALID_REQUEST, message, param=self._found[0].param)


class Form:
    """A parsed form: the last value of a field, or all of them."""

    def __init__(self, pairs: list[tuple[str, str]]) -> None:
        self._pairs = pairs

    def get(self, name: str, default: str = "") -> str:
        values = self.getlist(name)
        return values[-1] if values else default

    def getlist(self, name: str) -> list[str]:
        return [value for key, value in self._pairs if key == name]

    def names(self) -> list[str]:
        return list(dict.fromkeys(key for key, _ in self._pairs))

    def values(self) -> dict[str, str]:
        """Every field's last value: what a form shown again is filled with."""
        return {key: value for key, value in self._pairs}


async def read_form(request: Request, timeout_s: float) -> Form:
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type != _FORM_TYPE:
        raise GatewayError(ErrorCode.INVALID_REQUEST, f"The console takes forms sent as {_FORM_TYPE}.")
    body = await read_body(request, MAX_FORM_BYTES, timeout_s)
    try:
        text = body.decode("utf-8")
        pairs = urllib.parse.parse_qsl(
            text, keep_blank_values=True, max_num_fields=_MAX_FIELDS, errors="strict"
        )
    except (UnicodeDecodeError, ValueError):
        raise GatewayError(ErrorCode.INVALID_REQUEST, "The form could not be read.") from None
    return Form(pairs)


def _number_text(form: Form, name: str) -> str:
    return form.get(name).strip().replace("_", "").replace(",", "")


def whole_number(form: Form, name: str) -> int | None:
    """A number field: blank is None; anything else must be digits (the range is spec.py's)."""
    raw = _number_text(form, name)
    if not raw:
        return None
    if not raw.isdigit() or len(raw) > 20:
        raise GatewayError(ErrorCode.INVALID_REQUEST, f"'{name}' must be a whole number.", param=name)
    return int(raw)


def _field(form: Form, errors: FormErrors, name: str, *, budgets: bool, where: str = "") -> int | str | None:
    """The number field `where + name`, judged as a number and then by the limit rules
    (gateway/limits/spec.py); None when refused (noted in `errors`). A money budget stays the
    decimal text it was typed as: spec.py reads it exactly."""
    if name in COST_FIELDS:
        text = form.get(where + name).strip()
        return text if errors.check(lambda: parse_limits({name: text}, budgets=budgets)) else None
    value: int | str | None = errors.check(lambda: whole_number(form, where + name))
    if (
        value is None
        or errors.check(lambda: parse_limits({name: value}, budgets=budgets, where=where)) is None
    ):
        return None
    return value


def limit_body(
    form: Form, fields: tuple[str, ...], errors: FormErrors, *, budgets: bool
) -> tuple[dict[str, Any], list[str]]:
    """The admin API's limit fields from a form, and the blank ones (to clear on an edit).
    `budgets`: a team's form (gateway/limits/spec.py's parse_limits)."""
    body: dict[str, Any] = {}
    blank: list[str] = []
    for name in fields:
        if not _number_text(form, name):
            blank.append(name)
            continue
        value = _field(form, errors, name, budgets=budgets)
        if value is not None:
            body[name] = value
    counts = form.get("tpm_counts")
    if counts and errors.check(lambda: parse_limits({"tpm_counts": counts}, budgets=budgets)) is not None:
        body["tpm_counts"] = counts
    return body, blank


def model_limit_rows(
    models: Iterable[str], limits: LimitSet | None, form: Form | None = None
) -> list[dict[str, str]]:
    """One row per model of a per-model limits table: the models served, and any other that has
    limits already (so they are seen, and can be removed). Filled from the stored limits, or from
    a form sent back with its error."""
    per_model = limits.per_model if limits is not None else {}
    rows = []
    for model in sorted({*models, *per_model}):
        own = per_model.get(model)
        stored = own.as_dict() if own is not None else {}
        row = {"model": model, "tpm_counts": str(stored.get("tpm_counts", "total"))}
        row.update({name: str(stored.get(name, "")) for name in MODEL_FIELDS})
        if form is not None:
            row.update(
                {name: form.get(f"{_MODEL_PREFIX}{model}.{name}") for name in (*MODEL_FIELDS, "tpm_counts")}
            )
        rows.append(row)
    return rows


def model_limit_body(
    form: Form, known: Collection[str], errors: FormErrors
) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """The admin API's `model_limits` from a form's per-model rows, and the `model_limits.<model>`
    names of the rows left blank (to clear on an edit). A model must be one of `known`: served, or
    holding limits already."""
    body: dict[str, dict[str, Any]] = {}
    blank: list[str] = []
    models = [
        name[len(_MODEL_PREFIX) :].rpartition(".")[0]
        for name in form.names()
        if name.startswith(_MODEL_PREFIX)
    ]
    for model in dict.fromkeys(models):
        if model not in known:
            errors.check(_unknown_model)
            continue
        own: dict[str, Any] = {}
        where = f"{_MODEL_PREFIX}{model}."
        for name in MODEL_FIELDS:
            if not _number_text(form, where + name):
                continue
            value = _field(form, errors, name, budgets=False, where=where)
            if value is not None:
                own[name] = value
        if not own:
            blank.append(f"{_MODEL_PREFIX}{model}")
            continue
        counts = form.get(f"{_MODEL_PREFIX}{model}.tpm_counts")
        if counts:
            own["tpm_counts"] = counts
        body[model] = own
    return body, blank


def _unknown_model() -> None:
    raise GatewayError(
        ErrorCode.INVALID_REQUEST,
        "'model_limits' names a model this gateway does not serve.",
        param="model_limits",
    )
