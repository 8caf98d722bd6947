"""The model file's field checkers (gateway/model_file.py, gateway/model_targets.py): each takes a
value and where it is in the file (`models[1].timeouts.idle`), and raises a ConfigError naming that
place when the value is wrong.
"""

from __future__ import annotations

import math
from typing import Any

from gateway.errors import ConfigError
from gateway.model_table import MODEL_NAME_RE


def require_mapping(value: Any, where: str, *, allowed: set[str]) -> None:
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: expected a mapping")
    unknown = sorted(str(key) for key in value if key not in allowed)
    if unknown:
        prefix = "" if where == "config" else f"{where}."
        raise ConfigError(f"{prefix}{unknown[0]}: unknown field (allowed: {', '.join(sorted(allowed))})")


def model_name(value: Any, where: str) -> str:
    if not isinstance(value, str) or not MODEL_NAME_RE.fullmatch(value):
        raise ConfigError(
            f"{where}: expected a model name (letters, digits and ._:/@+-, at most 128 characters)"
        )
    return value


def names(raw: Any, where: str) -> tuple[str, ...]:
    if not isinstance(raw, list):
        raise ConfigError(f"{where}: expected a list of names")
    return tuple(model_name(a, f"{where}[{i}]") for i, a in enumerate(raw))


def upstream_model(raw: Any, where: str) -> str | None:
    if raw is not None and (not isinstance(raw, str) or not raw.strip()):
        raise ConfigError(f"{where}: expected a non-empty string")
    return raw


def boolean(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f"{where}: must be true or false")
    return value


def number(value: Any, where: str, *, whole: bool = False) -> Any:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"{where}: expected a number")
    if not math.isfinite(value) or value <= 0:
        raise ConfigError(f"{where}: must be a positive number")
    if whole and value != int(value):
        raise ConfigError(f"{where}: must be a whole number")
    return int(value) if whole else float(value)
