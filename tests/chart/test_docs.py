"""Every value of the chart is documented: a description on every property of values.schema.json,
and helm/sluicegate/README.md, whose values reference tools/chart_readme.py writes from them, is up
to date and names every key of values.yaml."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import yaml

from tests.chart.conftest import CHART, ROOT


def schema() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((CHART / "values.schema.json").read_text())
    return loaded


def properties(node: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    """Every (path, schema) under `properties`, wherever it is nested (items, anyOf, ...)."""
    if isinstance(node, dict):
        for key, child in node.get("properties", {}).items():
            child_path = f"{path}.{key}" if path else key
            yield child_path, child
            yield from properties(child, child_path)
        for key, child in node.items():
            if key != "properties":
                yield from properties(child, f"{path}<{key}>")
    elif isinstance(node, list):
        for child in node:
            yield from properties(child, path)


def values_keys(values: dict[str, Any], node: dict[str, Any], path: str = "") -> Iterator[str]:
    """Every key path of values.yaml; a map the schema leaves free-form (resources.requests,
    podSecurityContext, ...) is one value, its keys are not."""
    for key, child in values.items():
        child_path = f"{path}.{key}" if path else key
        yield child_path
        schema_node = node.get("properties", {}).get(key, {})
        if isinstance(child, dict) and "properties" in schema_node:
            yield from values_keys(child, schema_node, child_path)


def test_every_schema_property_has_a_description() -> None:
    found = list(properties(schema()))
    assert len(found) > 300
    missing = [path for path, node in found if not str(node.get("description", "")).strip()]
    assert not missing, f"values.schema.json properties without a description: {missing}"


def test_chart_readme_is_generated_from_the_current_values_and_schema() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "chart_readme.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_chart_readme_names_every_value() -> None:
    readme = (CHART / "README.md").read_text()
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    paths = list(values_keys(values, schema()))
    assert len(paths) > 200
    # A row of a table, or the heading of a top-level section.
    missing = [p for p in paths if f"| `{p}` |" not in readme and f"### `{p}`" not in readme]
    assert not missing, f"values.yaml keys missing from helm/sluicegate/README.md: {missing}"
    for key in ("gateway.shutdown.delaySeconds", "gateway.shutdown.drainTimeoutSeconds"):
        assert f"`{key}`" in readme
    for key in ("enabled", "size", "storageClass", "accessModes", "existingClaim"):
        assert f"`gateway.spool.persistence.{key}`" in readme
    model_keys = [p for p, _ in properties(schema()["properties"]["models"]["items"])]
    missing = [p for p in model_keys if f"| `models[].{p}` |" not in readme]
    assert not missing, f"models[] keys missing from the README: {missing}"
