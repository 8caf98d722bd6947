"""What a model's tokens cost, for chargeback: an optional price per model in the model table,

    price: {input_per_million: "0.15", output_per_million: "0.60", currency: USD}

read as exact decimals (strings or YAML numbers, never kept as floats), and costs computed with
exact decimal arithmetic: `tokens x price / 10^6` is never rounded, so the usage report's cost of
a row is exactly its prompt tokens times the input price plus its completion tokens times the
output price, and a total is exactly the sum of its rows. Costs travel as decimal strings
(`amount`), which JSON, CSV and a spreadsheet all keep exact.

What a request cost is decided when it ran (`Price.nano_cost`) and recorded with its usage, in
integer nano-units (10^-9 of the table's currency), with the price's `version`: the usage report
sums those, so a later price change leaves past costs as they were. Integers, never floats: settle.lua
hands them to HINCRBY as the strings they came as, and any that Lua itself adds up (a money budget)
stay below 2^53 (`MAX_NANO`), where a double still holds every integer exactly.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from decimal import ROUND_CEILING, Context, Decimal, Inexact, InvalidOperation, Rounded, localcontext
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
NANO_PER_UNIT = 10**9
_NANO = -9
# The most nano-units (about 9 million of the currency) any sum kept in Lua may reach: a Lua number
# is a double, exact for every integer up to 2^53 and no further.
MAX_NANO = 2**53 - 1
# The price version of usage recorded for a model that had no price when it ran: it costs nothing,
# and a price set later does not change that.
UNPRICED = "none"


@dataclass(frozen=True, slots=True)
class Price:
    """Per million tokens: prompt (input) and completion (output) tokens priced apart."""

    input_per_million: Decimal
    output_per_million: Decimal
    currency: str = DEFAULT_CURRENCY
    # `price.batch_multiplier`: what a batch line's tokens cost relative to these prices (OpenAI
    # prices batch tokens at half); 1 unless the model table says.
    batch_multiplier: Decimal = Decimal(1)
    # Names these prices among all others (recorded with the usage they priced): the currency and
    # a digest of the two prices, normalised so "0.60" and "0.6" are the same version.
    version: str = field(init=False, compare=False, repr=False)

    def cost(self, prompt_tokens: int, completion_tokens: int) -> Decimal:
        with localcontext(_EXACT):
            per_million = prompt_tokens * self.input_per_million + completion_tokens * self.output_per_million
            return per_million.scaleb(_PER_MILLION)

    def nano_cost(self, prompt_tokens: int, completion_tokens: int) -> int:
        """`cost` in whole nano-units, rounded up: a price may have 18 decimal places a token, a
        nano-unit holds 9, so a request is charged at most one nano-unit more than its exact cost,
        never less (a budget it is held to is never overrun by rounding)."""
        with localcontext(_EXACT):
            exact = self.cost(prompt_tokens, completion_tokens).scaleb(-_NANO)
        return int(exact.to_integral_value(rounding=ROUND_CEILING))

    def __post_init__(self) -> None:
        # Worked out once, not per request: every priced request's usage record carries it.
        text = f"{self.input_per_million.normalize():f}/{self.output_per_million.normalize():f}"
        digest = hashlib.sha256(text.encode()).hexdigest()[:12]
        object.__setattr__(self, "version", f"{self.currency}-{digest}")

    def batched(self) -> Price:
        """The prices a batch line pays (gateway/batch/); itself when there is no multiplier."""
        if self.batch_multiplier == 1:
            return self
        with localcontext(_EXACT):
            return Price(
                self.input_per_million * self.batch_multiplier,
                self.output_per_million * self.batch_multiplier,
                self.currency,
            )

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


def from_nano(nano: int) -> Decimal:
    """Nano-units as the amount of currency they are, exactly."""
    with localcontext(_EXACT):
        return Decimal(nano).scaleb(_NANO)


def currency_of(version: str) -> str | None:
    """The currency a recorded price version was in (None: the model had no price)."""
    return None if version == UNPRICED else version.split("-", 1)[0]


def parse_amount(text: str) -> Decimal:
    """The inverse of `amount`."""
    return Decimal(text)


def parse_price(raw: Any, where: str) -> Price | None:
    """A model table's `price` (None when absent); a ConfigError names the bad field."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a mapping with input_per_million and output_per_million")
    allowed = ("input_per_million", "output_per_million", "currency", "batch_multiplier")
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
        batch_multiplier=_multiplier(raw.get("batch_multiplier", 1), f"{where}.batch_multiplier"),
    )


def _multiplier(value: Any, where: str) -> Decimal:
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ConfigError(f'{where}: expected a decimal number from 0 to 1 such as "0.5"')
    try:
        number = Decimal(str(value))
    except ArithmeticError:
        raise ConfigError(f'{where}: expected a decimal number from 0 to 1 such as "0.5"') from None
    if not number.is_finite() or not 0 <= number <= 1:
        raise ConfigError(f'{where}: expected a decimal number from 0 to 1 such as "0.5"')
    return number


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
