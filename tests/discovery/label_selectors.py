"""Kubernetes label selectors, as the fake API server evaluates them: equality (`=`, `==`, `!=`),
sets (`in (...)`, `notin (...)`) and existence (`key`, `!key`), comma-joined."""

from __future__ import annotations

import re

_SET_RE = re.compile(r"^([A-Za-z0-9./_-]+)\s+(in|notin)\s+\(([^)]*)\)$")


def _split_requirements(selector: str) -> list[str]:
    parts: list[str] = []
    current: list[str] = []
    depth = 0
    for char in selector:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            parts.append("".join(current).strip())
            current = []
        else:
            current.append(char)
    if "".join(current).strip():
        parts.append("".join(current).strip())
    return parts


def parse_selector(selector: str) -> list[tuple[str, str, set[str]]]:
    """(key, operator, values) requirements; ValueError when malformed (the server answers 400)."""
    requirements: list[tuple[str, str, set[str]]] = []
    for part in _split_requirements(selector or ""):
        if match := _SET_RE.match(part):
            values = {v.strip() for v in match.group(3).split(",") if v.strip()}
            requirements.append((match.group(1), match.group(2), values))
        elif "!=" in part:
            key, value = part.split("!=", 1)
            requirements.append((key.strip(), "!=", {value.strip()}))
        elif "=" in part:
            key, value = re.split(r"==?", part, maxsplit=1)
            requirements.append((key.strip(), "=", {value.strip()}))
        elif part.startswith("!"):
            requirements.append((part[1:].strip(), "!", set()))
        elif re.fullmatch(r"[A-Za-z0-9./_-]+", part):
            requirements.append((part, "exists", set()))
        else:
            raise ValueError(f"unable to parse requirement: {part!r}")
    return requirements


def matches(requirements: list[tuple[str, str, set[str]]], labels: dict[str, str]) -> bool:
    for key, op, values in requirements:
        present = key in labels
        value = labels.get(key)
        ok = {
            "=": present and value in values,
            "in": present and value in values,
            "!=": not present or value not in values,
            "notin": not present or value not in values,
            "exists": present,
            "!": not present,
        }[op]
        if not ok:
            return False
    return True
