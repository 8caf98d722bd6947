"""Containers of the built images, run with podman as a person would run them (no daemon).

Every container runs on the host network (it reaches the test's Redis and workers on loopback, and
the test reaches it the same way), with a read-only root filesystem, under a name of its own that
teardown removes. Two settings are this kind of machine's, not the images' (../shared/notes/images.md):
- runc, not crun: Debian's crun refuses the hybrid cgroup layout these machines mount;
- ulimits no higher than the hard limits: rootful podman otherwise raises them, which root without
  CAP_SYS_RESOURCE may not do.
"""

from __future__ import annotations

import json
import resource
import secrets
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
DIST = ROOT / "dist"
IMAGES = ("gateway", "reframr")
WAIT_S = 120.0


def podman(*args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(["podman", *args], capture_output=True, text=True, timeout=timeout, check=False)
    if check and done.returncode != 0:
        raise AssertionError(f"podman {' '.join(args)}: exit {done.returncode}\n{done.stdout}{done.stderr}")
    return done


def _limit(which: int, cap: int) -> int:
    _, hard = resource.getrlimit(which)
    return cap if hard == resource.RLIM_INFINITY else min(hard, cap)


def run_options() -> list[str]:
    """What every `podman run` here adds, whatever the image."""
    options = ["--runtime", "runc"] if shutil.which("runc") else []
    nofile = _limit(resource.RLIMIT_NOFILE, 65536)
    nproc = _limit(resource.RLIMIT_NPROC, 4096)
    return [*options, "--ulimit", f"nofile={nofile}:{nofile}", "--ulimit", f"nproc={nproc}:{nproc}"]


def load(name: str) -> str:
    """`podman load` of dist/sluicegate-<name>.oci.tar; the image's name as the archive gives it."""
    done = podman("load", "--quiet", "--input", str(DIST / f"sluicegate-{name}.oci.tar"), timeout=300)
    # "Loaded image: localhost/sluicegate-gateway:0.1.0" (one image per archive)
    (line,) = [line for line in done.stdout.splitlines() if line.startswith("Loaded image")]
    return line.split(":", 1)[1].strip()


def inspect_image(image: str) -> dict[str, Any]:
    (found,) = json.loads(podman("image", "inspect", image).stdout)
    config: dict[str, Any] = found["Config"]
    return config


@dataclass
class Container:
    name: str
    url: str

    def logs(self) -> str:
        done = podman("logs", self.name, check=False)
        return done.stdout + done.stderr

    def running(self) -> bool:
        done = podman("inspect", "--format", "{{.State.Running}}", self.name, check=False)
        return done.stdout.strip() == "true"

    def signal(self, name: str) -> None:
        podman("kill", "--signal", name, self.name)

    def wait(self) -> int:
        """Its exit status, once it has exited."""
        return int(podman("wait", self.name, timeout=WAIT_S).stdout.strip())

    def exec(self, *command: str) -> subprocess.CompletedProcess[str]:
        return podman("exec", self.name, *command, check=False)

    def remove(self) -> None:
        podman("rm", "--force", "--volumes", self.name, check=False)


def start(image: str, *args: str, port: int, options: tuple[str, ...] = ()) -> Container:
    """`podman run --detach` of `image` with `args` after its entrypoint, read-only, on the host
    network; returned once http://127.0.0.1:`port`/ answers (/healthz or /health)."""
    name = f"sluicegate-test-{secrets.token_hex(4)}"
    detached = ["--detach", "--name", name, "--network", "host", "--read-only", *run_options()]
    podman("run", *detached, *options, image, *args)
    container = Container(name, f"http://127.0.0.1:{port}")
    deadline = time.monotonic() + WAIT_S
    while not (_answers(f"{container.url}/healthz") or _answers(f"{container.url}/health")):
        if not container.running() or time.monotonic() > deadline:
            logs = container.logs()
            container.remove()
            raise AssertionError(f"{image} did not start serving on port {port}:\n{logs}")
        time.sleep(0.1)
    return container


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2):  # noqa: S310
            return True
    except urllib.error.HTTPError:
        return True  # it is serving, just not ready yet
    except (urllib.error.URLError, OSError):
        return False
