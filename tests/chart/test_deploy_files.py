"""deploy/: no Docker engine runs here, so the Dockerfiles and the compose file are checked
statically: pinned bases, a non-root user, and references to files and commands that exist."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

from gateway.model_file import parse_model_table
from tests.chart.conftest import ROOT

DOCKER = ROOT / "deploy" / "docker"
COMPOSE = ROOT / "deploy" / "compose" / "compose.yaml"
PINNED = re.compile(r"^[\w./-]+:\d+\.\d+\.\d+[-\w.]*(@sha256:[0-9a-f]{64})?$")


def instructions(path: Path) -> list[tuple[str, str]]:
    text = re.sub(r"\\\n", " ", path.read_text())
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]
    return [(line.split(maxsplit=1)[0].upper(), line.split(maxsplit=1)[1]) for line in lines]


@pytest.mark.parametrize("dockerfile", ["gateway.Dockerfile", "reframr.Dockerfile"])
def test_dockerfile_is_multistage_pinned_and_non_root(dockerfile: str) -> None:
    steps = instructions(DOCKER / dockerfile)
    # The base is an argument (make image passes one made from Debian's packages); its default, the
    # one every other build uses, is the official slim image with the Python Reframr needs.
    defaults = dict(arg.split("=", 1) for op, arg in steps if op == "ARG" and "=" in arg)
    assert PINNED.match(defaults["BASE"]), f"{defaults['BASE']}: pin a full version"
    assert defaults["BASE"].startswith("docker.io/library/python:3.13."), defaults["BASE"]
    stages: list[str] = []
    for op, arg in steps:
        if op == "FROM":
            base, *alias = arg.split()
            assert base == "${BASE}" or base in stages, f"FROM {base}: the BASE argument or a stage"
            stages += alias[1:]
    assert len(stages) >= 1, "multi-stage: build tools stay out of the runtime image"
    assert "sbom" in stages, "the SBOM's stage: make image writes its file beside the archive"
    users = [args for op, args in steps if op == "USER"]
    assert users
    assert users[-1].split(":")[0] not in {"0", "root"}
    # Numeric, so that Kubernetes' runAsNonRoot can check it.
    assert users[-1].split(":")[0].isdigit()
    for op, args in steps:
        if op == "COPY" and "--from" not in args:
            for source in shlex.split(args)[:-1]:
                assert (ROOT / source).exists(), f"COPY {source}: no such path in the repository"
    assert (DOCKER / f"{dockerfile}.dockerignore").exists()


def test_chart_runs_the_users_of_the_images() -> None:
    values = yaml.safe_load((ROOT / "helm" / "sluicegate" / "values.yaml").read_text())
    assert values["gateway"]["podSecurityContext"]["runAsUser"] == 10001
    assert values["engines"]["reframr"]["podSecurityContext"]["runAsUser"] == 10001


def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())
    return loaded


def test_compose_runs_redis_a_fake_worker_and_the_gateway() -> None:
    services = compose()["services"]
    assert set(services) == {"redis", "worker", "gateway"}
    for name, service in services.items():
        image = service["image"]
        assert PINNED.match(image) or re.match(r"^sluicegate:\d+\.\d+\.\d+$", image), f"{name}: {image}"
        if "build" in service:
            assert (COMPOSE.parent / service["build"]["context"] / service["build"]["dockerfile"]).is_file()
        assert "healthcheck" in service, name
    # What runs: the service's entrypoint, else the image's (`sluicegate`), then its command.
    run = {name: s.get("entrypoint", ["sluicegate"]) + s.get("command", []) for name, s in services.items()}
    assert run["worker"][:3] == ["python", "-m", "workers.fake"]
    assert run["gateway"] == ["sluicegate", "serve"]
    env = services["gateway"]["environment"]
    assert env["SLUICEGATE_REDIS_URL"] == "redis://redis:6379/0"
    assert services["gateway"]["depends_on"]["redis"]["condition"] == "service_healthy"


def test_compose_model_table_is_valid_and_reaches_the_worker() -> None:
    gateway = compose()["services"]["gateway"]
    mounts = {
        target.split(":")[0]: source for source, target in (v.split(":", 1) for v in gateway["volumes"])
    }
    config = gateway["environment"]["SLUICEGATE_CONFIG"]
    table_file = COMPOSE.parent / mounts[config]
    table = parse_model_table(yaml.safe_load(table_file.read_text()))
    worker = compose()["services"]["worker"]["command"]  # the fake worker's arguments
    port = worker[worker.index("--port") + 1]
    served = {worker[i + 1] for i, arg in enumerate(worker) if arg == "--model"}
    for model in table.models:
        assert model.name in served
        assert all(url == f"http://worker:{port}" for url in model.endpoints)


def test_release_workflow_publishes_the_images_the_chart_pulls() -> None:
    """The chart's default images are the ones .github/workflows/release.yml pushes (it cannot run
    here: its names and files are checked instead)."""
    workflow = yaml.safe_load((ROOT / ".github" / "workflows" / "release.yml").read_text())
    trigger = workflow.get("on", workflow.get(True))  # YAML 1.1 reads a bare `on` as true
    assert trigger == {"push": {"tags": ["v*.*.*"]}}
    jobs = workflow["jobs"]
    built = {(row["dockerfile"], row["name"]) for row in jobs["image"]["strategy"]["matrix"]["include"]}
    for dockerfile, _ in built:
        assert (DOCKER / f"{dockerfile}.Dockerfile").is_file()
    values = yaml.safe_load((ROOT / "helm" / "sluicegate" / "values.yaml").read_text())
    chart = yaml.safe_load((ROOT / "helm" / "sluicegate" / "Chart.yaml").read_text())
    owner = chart["home"].removeprefix("https://github.com/").split("/")[0]
    pulled = {
        "gateway": values["gateway"]["image"]["repository"],
        "reframr": values["engines"]["reframr"]["image"]["repository"],
    }
    assert {(d, f"ghcr.io/{owner}/{name}") for d, name in built} == set(pulled.items())
    steps = jobs["image"]["steps"]
    build = next(s for s in steps if s.get("uses", "").startswith("docker/build-push-action@"))
    assert build["with"]["platforms"] == "linux/amd64,linux/arm64"
    assert any("cosign sign --yes" in s.get("run", "") for s in steps)
    # The chart is published only once the images were scanned.
    assert set(jobs["chart"]["needs"]) == {"image", "scan"}
