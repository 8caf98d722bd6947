"""Fixtures for the chart tests: a real, pinned helm and renders of values sets, each rendered once.

helm comes from `make helm` (tools/get-helm.sh) at .cache/helm/helm; when it is missing the
session fetches it with the same script, and fails (never skips) when it cannot.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "sluicegate"
EXAMPLES = ROOT / "deploy" / "examples"
HELM = ROOT / ".cache" / "helm" / "helm"
HELM_VERSION = "v3.19.0"
RELEASE = "sg"
NAMESPACE = "llm"

Manifest = dict[str, Any]


@dataclass(frozen=True)
class Helm:
    binary: Path
    env: dict[str, str]

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.binary), *args], env=self.env, capture_output=True, text=True, timeout=60, check=False
        )


@dataclass
class Render:
    """One `helm template` of the chart with some values: its objects, or its error."""

    objects: list[Manifest] = field(default_factory=list)
    error: str = ""

    def of_kind(self, kind: str) -> list[Manifest]:
        return [o for o in self.objects if o["kind"] == kind]

    def one(self, kind: str, name: str | None = None) -> Manifest:
        found = [o for o in self.of_kind(kind) if name is None or o["metadata"]["name"] == name]
        assert len(found) == 1, (
            f"expected one {kind} {name or ''}, got {[o['metadata']['name'] for o in found]}"
        )
        return found[0]


@pytest.fixture(scope="session")
def helm(tmp_path_factory: pytest.TempPathFactory) -> Helm:
    if not HELM.exists():
        fetched = subprocess.run(
            [str(ROOT / "tools" / "get-helm.sh")], capture_output=True, text=True, timeout=300, check=False
        )
        assert fetched.returncode == 0, f"tools/get-helm.sh failed:\n{fetched.stdout}\n{fetched.stderr}"
    home = tmp_path_factory.mktemp("helm-home")
    # A helm of the developer's own must not read or write its repositories and plugins here.
    env = {
        **os.environ,
        "HELM_CACHE_HOME": str(home / "cache"),
        "HELM_CONFIG_HOME": str(home / "config"),
        "HELM_DATA_HOME": str(home / "data"),
    }
    tool = Helm(HELM, env)
    version = tool.run("version", "--short")
    assert version.stdout.startswith(HELM_VERSION), f"expected helm {HELM_VERSION}, got {version.stdout!r}"
    return tool


Renderer = Callable[..., Render]


@pytest.fixture(scope="session")
def render(helm: Helm, tmp_path_factory: pytest.TempPathFactory) -> Renderer:
    """render(values_file, ..., values={...}, kube="1.34.0"): cached per distinct input."""
    cache: dict[str, Render] = {}
    folder = tmp_path_factory.mktemp("values")

    def renderer(*files: Path, values: dict[str, Any] | None = None, kube: str = "1.34.0") -> Render:
        key = repr((files, yaml.safe_dump(values or {}, sort_keys=True), kube))
        if key not in cache:
            args = ["template", RELEASE, str(CHART), "--namespace", NAMESPACE, "--kube-version", kube]
            for f in files:
                args += ["-f", str(f)]
            if values is not None:
                extra = folder / f"values-{len(cache)}.yaml"
                extra.write_text(yaml.safe_dump(values))
                args += ["-f", str(extra)]
            done = helm.run(*args)
            if done.returncode != 0:
                cache[key] = Render(error=done.stderr)
            else:
                objects = [o for o in yaml.safe_load_all(done.stdout) if o]
                cache[key] = Render(objects=objects)
        return cache[key]

    return renderer


def rendered(render: Renderer, *files: Path, values: dict[str, Any] | None = None) -> Render:
    """A render that must succeed."""
    result = render(*files, values=values)
    assert not result.error, result.error
    return result


def containers(pod_owner: Manifest) -> list[Manifest]:
    spec = pod_owner["spec"]["template"]["spec"]
    return [*spec.get("initContainers", []), *spec["containers"]]


def pod_owners(result: Render) -> list[Manifest]:
    return [o for o in result.objects if o["kind"] in ("Deployment", "StatefulSet", "DaemonSet", "Job")]


GATEWAY = f"{RELEASE}-sluicegate"


def gateway(result: Render) -> Manifest:
    """The gateway's pod owner: a Deployment, or a StatefulSet with a persistent usage spool."""
    found = [o for o in pod_owners(result) if o["metadata"]["name"] == GATEWAY]
    assert len(found) == 1, f"expected one gateway, got {[o['kind'] for o in found]}"
    return found[0]


def gateway_env(result: Render) -> dict[str, dict[str, Any]]:
    (container,) = gateway(result)["spec"]["template"]["spec"]["containers"]
    return {e["name"]: e for e in container["env"]}
