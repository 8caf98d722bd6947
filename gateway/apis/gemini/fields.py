"""Reading a Gemini body's field names: camelCase, or the snake_case spelling that protobuf JSON
accepts too. Opening the body, re-encoding it and a field's 400 are every API's
(gateway.proxy.translation.body)."""

from __future__ import annotations

from typing import Any


def get(obj: dict[str, Any], name: str) -> Any:
    """A field under its camelCase name, or its snake_case one."""
    if name in obj:
        return obj[name]
    return obj.get("".join(f"_{c.lower()}" if c.isupper() else c for c in name))


def camel(name: str) -> str:
    """A field's camelCase name, whichever spelling came (what `ignored` lists)."""
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value == value  # not NaN
