"""Flag types and the limit flags the team and key commands share."""

from __future__ import annotations

import argparse
import datetime as dt
from typing import Any

_DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_MODEL_LIMIT_NAMES = ("rpm", "tpm", "max_concurrency", "tpm_counts")
_TPM_COUNTS = ("total", "input", "output")
_LIMIT_FLAGS = (
    "rpm",
    "tpm",
    "max_concurrency",
    "tpm_counts",
    "daily_tokens",
    "monthly_tokens",
    "daily_cost",
    "monthly_cost",
    "weight",
    "priority",
    "default_deadline_ms",
    "overflow",
)


def duration(text: str) -> float:
    """'90', '30s', '10m', '1h' or '2d' as seconds."""
    unit = _DURATION_UNITS.get(text[-1:].lower())
    try:
        value = float(text[:-1] if unit else text) * (unit or 1)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (use e.g. 30s, 10m, 1h, 2d)") from None
    if value < 0:
        raise argparse.ArgumentTypeError("a duration cannot be negative")
    return value


def day(text: str) -> str:
    """YYYY-MM-DD, checked here so a typo is a usage error, not a round trip."""
    try:
        return dt.date.fromisoformat(text).isoformat()
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a date: {text!r} (use YYYY-MM-DD)") from None


def model_limit(text: str) -> tuple[str, dict[str, Any]]:
    """`MODEL:rpm=10,tpm=1000` -> (MODEL, {"rpm": 10, "tpm": 1000}). Model names may hold a `:`
    (`llama3:8b`), so the limits are what follows the last one."""
    model, _, spec = text.rpartition(":")
    if not model or not spec:
        raise argparse.ArgumentTypeError(f"not a model limit: {text!r} (use e.g. llama-3-8b:rpm=10,tpm=5000)")
    limits: dict[str, Any] = {}
    for item in spec.split(","):
        name, _, value = item.partition("=")
        name = name.strip().replace("-", "_")
        if name not in _MODEL_LIMIT_NAMES or not value:
            raise argparse.ArgumentTypeError(
                f"not a model limit: {item!r} in {text!r} (names: {', '.join(_MODEL_LIMIT_NAMES)})"
            )
        if name == "tpm_counts":
            if value not in _TPM_COUNTS:
                raise argparse.ArgumentTypeError(f"tpm_counts must be one of {', '.join(_TPM_COUNTS)}")
            limits[name] = value
            continue
        try:
            limits[name] = int(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be a whole number, not {value!r}") from None
    return model, limits


def add_limit_flags(parser: argparse.ArgumentParser, *, team: bool, update: bool) -> None:
    parser.add_argument("--rpm", type=int, help="requests per minute")
    parser.add_argument("--tpm", type=int, help="tokens per minute")
    parser.add_argument("--tpm-counts", choices=_TPM_COUNTS, help="tokens a TPM limit counts")
    parser.add_argument("--max-concurrency", type=int, help="requests in flight at once")
    parser.add_argument("--daily-tokens", type=int, help="token budget per UTC day")
    parser.add_argument("--monthly-tokens", type=int, help="token budget per UTC month")
    # Strings, sent as typed: the gateway checks them and keeps them exact (never a float here).
    parser.add_argument("--daily-cost", metavar="AMOUNT", help='money budget per UTC day, e.g. "12.50"')
    parser.add_argument("--monthly-cost", metavar="AMOUNT", help='money budget per UTC month, e.g. "300"')
    if team:
        parser.add_argument(
            "--weight", type=int, help="share of a saturated model pool relative to other teams (default 1)"
        )
    parser.add_argument(
        "--priority",
        type=int,
        help="band in a saturated model pool, 1 (lowest) to 9 (default 5): a higher band is served "
        "first" + ("" if team else "; a key cannot rise above its team's"),
    )
    parser.add_argument(
        "--default-deadline-ms",
        type=int,
        help="milliseconds a request that sends no x-sluicegate-deadline-ms may wait for its first "
        "token before it is refused (1 to 86400000)" + ("" if team else "; a key's overrides its team's"),
    )
    parser.add_argument(
        "--overflow",
        choices=("allowed", "denied"),
        help="whether requests may be served by a model's external overflow provider when its "
        "own workers cannot in time (docs/overflow.md): "
        + ("denied unless a team allows it" if team else "a key may deny what its team allows"),
    )
    parser.add_argument(
        "--model-limit",
        action="append",
        type=model_limit,
        default=[],
        metavar="MODEL:NAME=N[,NAME=N]",
        help="limits on one model (rpm, tpm, max_concurrency, tpm_counts); repeatable, "
        "e.g. --model-limit llama-3-8b:rpm=10",
    )
    if update:
        example = "tpm,daily-tokens" if team else "rpm,tpm"
        parser.add_argument(
            "--clear",
            help=f"comma-separated limits to remove, e.g. {example}; model-limits.MODEL removes "
            "that model's limits, model-limits all of them",
        )


def limits_of(args: argparse.Namespace) -> dict[str, Any]:
    """The admin API body's limit fields from the flags given."""
    body: dict[str, Any] = {
        name: getattr(args, name) for name in _LIMIT_FLAGS if getattr(args, name, None) is not None
    }
    per_model: dict[str, dict[str, Any]] = {}
    for model, limits in getattr(args, "model_limit", None) or []:
        per_model.setdefault(model, {}).update(limits)
    if per_model:
        body["model_limits"] = per_model
    if getattr(args, "clear", None):
        body["clear"] = [_limit_name(c.strip()) for c in args.clear.split(",") if c.strip()]
    return body


def _limit_name(text: str) -> str:
    """`daily-tokens` -> `daily_tokens`; `model-limits.llama-3-8b` -> `model_limits.llama-3-8b`
    (a model's name is kept as it is)."""
    name, dot, model = text.partition(".")
    return name.replace("-", "_") + dot + model


def models_of(text: str) -> list[str] | None:
    """`a,b` -> ["a", "b"]; `*` -> None (every model)."""
    if text.strip() == "*":
        return None
    return [m.strip() for m in text.split(",") if m.strip()]
