"""What a model's tokens cost, for chargeback: an optional price per model in the model table,

    price: {input_per_million: "0.15", output_per_million: "0.60", currency: USD}

read as exact decimals (strings or YAML numbers, never kept as floats), and costs computed with
exact decimal arithmetic: `tokens x price / 10^6` is never rounded, so the usage report's cost of
a row is exactly its prompt tokens times the input price plus its completion tokens times the
output price, and a total is exactly the sum of its rows. Costs travel as decimal strings
(`amount`), which JSON, CSV and a spreadsheet all keep exact.

Budgets stay in tokens (gateway/limits): a price only changes what the usage report shows.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Context, Decimal, Inexact, InvalidOperation, Rounded, localcontext
from typing import Any

from gateway.errors import ConfigError

DEFAULT_CURRENCY = "USD"
_CURRENCY_RE = re.compile(r"^[A-Z]{3}$")  # an ISO 4217 code (USD, EUR) or a 3-letter unit of yours
# Bounds that keep every product exact in _EXACT: a price below 10^9 a million tokens with at
# most 12 decimals, times a token count below 2^63, fits in 50 digits with room to sum rows.
_MAX_PRICE = Decimal(10) ** 9
_MAX_DECIMALS = 12
_PER_MILLION = -6
# Wide enough that no product or sum here is ever rounded; a rounding would raise, not pass.
_EXACT = Context(prec=100, traps=[Inexact, Rounded, InvalidOperation])


@dataclass(frozen=True, slots=True)
class Price:
    """Per million tokens: prompt (input) and completion (output) tokens priced apart."""

    input_per_million: Decimal
    output_per_million: Decimal
    currency: str = DEFAULT_CURRENCY

    def cost(self, prompt_tokens: int, completion_tokens: int) -> Decimal:
        with localcontext(_EXACT):
            per_million = prompt_tokens * self.input_per_million + completion_tokens * self.output_per_million
            return per_million.scaleb(_PER_MILLION)

    def per_token(self) -> tuple[float, float]:
        """(input, output) per token as floats: for Prometheus, whose samples are floats anyway;
        the usage report's exact costs never go through these."""
        with localcontext(_EXACT):
            return (
                float(self.input_per_million.scaleb(_PER_MILLION)),
                float(self.output_per_million.scaleb(_PER_MILLION)),
            )


def add(amounts: Iterable[Decimal]) -> Decimal:
    """The exact sum."""
    with localcontext(_EXACT):
        return sum(amounts, Decimal(0))


def amount(value: Decimal) -> str:
    """A cost as a plain decimal string: no exponent, no trailing zeros ("0.00015", "12", "0")."""
    with localcontext(_EXACT):
        return format(value.normalize(), "f")


def parse_amount(text: str) -> Decimal:
    """The inverse of `amount`."""
    return Decimal(text)


def parse_price(raw: Any, where: str) -> Price | None:
    """A model table's `price` (None when absent); a ConfigError names the bad field."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a mapping with input_per_million and output_per_million")
    allowed = ("input_per_million", "output_per_million", "currency")
    unknown = sorted(str(key) for key in raw if key not in allowed)
    if unknown:
        raise ConfigError(f"{where}.{unknown[0]}: unknown field (allowed: {', '.join(allowed)})")
    currency = raw.get("currency", DEFAULT_CURRENCY)
    if not isinstance(currency, str) or not _CURRENCY_RE.fullmatch(currency):
        raise ConfigError(f"{where}.currency: expected a three-letter currency code such as USD")
    return Price(
        input_per_million=_per_million(raw.get("input_per_million"), f"{where}.input_per_million"),
        output_per_million=_per_million(raw.get("output_per_million"), f"{where}.output_per_million"),
        currency=currency,
    )


def _per_million(value: Any, where: str) -> Decimal:
    if value is None:
        raise ConfigError(f'{where}: required, the price of a million tokens (e.g. "0.15")')
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ConfigError(f'{where}: expected a decimal number such as "0.15"')
    # A YAML float's repr is the shortest text that reads back as it (0.6 -> "0.6"), so the
    # Decimal is what the operator wrote, not the binary float's 0.59999999999999997779...
    text = value.strip() if isinstance(value, str) else repr(value)
    try:
        price = Decimal(text)
    except InvalidOperation:
        raise ConfigError(f'{where}: expected a decimal number such as "0.15", got {text!r}') from None
    if not price.is_finite() or price < 0:
        raise ConfigError(f"{where}: must be a finite number, zero or more")
    if price >= _MAX_PRICE:
        raise ConfigError(f"{where}: must be below {_MAX_PRICE:,} a million tokens")
    exponent = price.as_tuple().exponent
    if isinstance(exponent, int) and exponent < -_MAX_DECIMALS:
        raise ConfigError(f"{where}: at most {_MAX_DECIMALS} decimal places")
    return price
