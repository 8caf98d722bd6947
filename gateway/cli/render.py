"""How the CLI prints: aligned tables, one record as `field: value` lines, times in UTC."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping, Sequence
from typing import Any


def printable(text: str) -> str:
    """Stored text (a key's name, a proxy's address) can hold anything: never a terminal escape."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def cell(value: Any) -> str:
    return "-" if value is None else printable(str(value))


def table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> str:
    cells = [[cell(row.get(c)) for c in columns] for row in rows]
    widths = [max([len(c), *(len(r[i]) for r in cells)]) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)) for r in cells]
    return "\n".join(line.rstrip() for line in lines)


def record(fields: Mapping[str, Any]) -> str:
    """One record, a `name: value` line per field."""
    width = max((len(name) for name in fields), default=0)
    return "\n".join(f"{name.ljust(width)}  {cell(value)}" for name, value in fields.items())


def when(seconds: float | None) -> str | None:
    """Unix seconds as `2026-11-24 15:40:00Z`; None stays None (shown as `-`)."""
    if seconds is None:
        return None
    return dt.datetime.fromtimestamp(seconds, dt.UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def limits(values: Mapping[str, Any]) -> str:
    """`rpm=10 tpm=1000 daily_tokens=5000 llama-3-8b:rpm=3`; `-` for none."""
    parts = [f"{name}={value}" for name, value in values.items() if name != "model_limits"]
    for model, own in (values.get("model_limits") or {}).items():
        parts += [f"{model}:{name}={value}" for name, value in own.items()]
    return " ".join(parts) or "-"


def shown(value: Any) -> str:
    return "-" if value is None else json.dumps(value, separators=(",", ":"))


def iso(seconds: float) -> str:
    """Unix seconds as ISO 8601 in UTC: `2026-11-24T15:40:00Z`."""
    return dt.datetime.fromtimestamp(seconds, dt.UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def change(name: str, value: Any) -> str:
    """One side of an audited change: times (`*_at` fields, kept as Unix seconds in the API's
    JSON) in ISO 8601, the rest as JSON."""
    if name.endswith("_at") and isinstance(value, int | float) and not isinstance(value, bool):
        return iso(value)
    return shown(value)
