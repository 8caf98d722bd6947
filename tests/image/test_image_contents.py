"""What both images are, read from the archives podman loaded: the OCI labels, the entrypoint and
default command, a numeric non-root user, and no compiler, installer or package cache inside."""

from __future__ import annotations

import json

import pytest
import yaml

from tests.image.podman import ROOT, inspect_image, podman, run_options

APP_VERSION: str = yaml.safe_load((ROOT / "helm" / "sluicegate" / "Chart.yaml").read_text())["appVersion"]
ENTRYPOINTS = {"gateway": (["sluicegate"], ["serve"]), "reframr": (["python", "-m", "workers.reframr"], None)}
# Run by the image's own python, as root (to see /root): what a shell finds on PATH, and the files
# of the places caches are left in (apt's lock files are not caches).
SURVEY = """
import json, os, shutil
tools = [t for t in ("gcc", "cc", "c++", "make", "pip", "pip3") if shutil.which(t)]
caches = []
for folder in ("/root/.cache", "/tmp", "/var/lib/apt/lists", "/var/cache/apt"):
    for path, dirs, files in os.walk(folder):
        caches += [os.path.join(path, f) for f in files if f != "lock"]
print(json.dumps({"tools": tools, "caches": caches, "python": shutil.which("python")}))
"""
# Every Python distribution the image's venv holds, with its version.
DISTRIBUTIONS = (
    "import json, importlib.metadata as m; print(json.dumps({d.name: d.version for d in m.distributions()}))"
)


@pytest.mark.parametrize("name", ["gateway", "reframr"])
def test_labels_entrypoint_and_user(images: dict[str, str], name: str) -> None:
    assert images[name].endswith(f":{APP_VERSION}"), "tagged with the chart's appVersion"
    config = inspect_image(images[name])
    labels = config["Labels"]
    assert labels["org.opencontainers.image.source"] == "https://github.com/sluicegate/sluicegate"
    assert labels["org.opencontainers.image.version"] == APP_VERSION
    assert labels["org.opencontainers.image.licenses"] == "Apache-2.0"
    entrypoint, cmd = ENTRYPOINTS[name]
    assert config["Entrypoint"] == entrypoint
    if cmd is not None:
        assert config["Cmd"] == cmd
    # Numeric, so that Kubernetes' runAsNonRoot can check it without reading /etc/passwd.
    assert config["User"] == "10001:10001"


@pytest.mark.parametrize("name", ["gateway", "reframr"])
def test_no_compiler_installer_or_cache_inside(images: dict[str, str], name: str) -> None:
    as_root = ["--rm", *run_options(), "--user", "0", "--entrypoint", "python"]
    done = podman("run", *as_root, images[name], "-c", SURVEY)
    found = json.loads(done.stdout)
    assert found["tools"] == [], found
    assert found["caches"] == [], found
    assert found["python"].startswith("/opt/"), "python is the image's venv"


@pytest.mark.parametrize("name", ["gateway", "reframr"])
def test_the_sbom_beside_the_archive_lists_what_the_image_holds(images: dict[str, str], name: str) -> None:
    sbom = json.loads((ROOT / "dist" / f"sluicegate-{name}.cdx.json").read_text())
    assert sbom["bomFormat"] == "CycloneDX"
    root = sbom["metadata"]["component"]
    assert (root["name"], root["version"]) == ("sluicegate", APP_VERSION)
    listed = {c["name"].lower(): c["version"] for c in sbom["components"]}
    done = podman("run", "--rm", *run_options(), "--entrypoint", "python", images[name], "-c", DISTRIBUTIONS)
    installed = {n.lower(): v for n, v in json.loads(done.stdout).items() if n != "sluicegate"}
    assert listed == installed
