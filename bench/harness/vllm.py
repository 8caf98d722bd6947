"""One real vLLM server (workers/vllm/serve.sh), started and stopped by this run only.

Only one vLLM may run on this machine at a time (it takes ~3 GiB and both cores). Before starting,
`vllm_server` waits (bounded) while any `vllm.entrypoints` process runs that this run did not start,
and never touches it. The server is stopped on exit, on error and on Ctrl-C (workers/vllm/stop.sh,
or its process group directly when the PID file no longer names it), and by the watchdog.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from harness.cpu import REPO, find_pids
from harness.procs import Children

SCRIPTS = REPO / "workers" / "vllm"
HOME = Path(os.environ.get("SLUICEGATE_VLLM_HOME") or REPO / ".cache" / "vllm")
PID_FILE = HOME / "server.pid"
LOG = HOME / "server.log"
MODEL_NAME = "tiny"  # serve.sh's default served-model name


@dataclass
class VllmServer:
    pid: int  # the API server; also its process-group id (serve.sh starts it with setsid)
    base: str

    def pids(self) -> list[int]:
        """The API server and its engine-core process(es)."""
        return find_pids(group=self.pid) or [self.pid]


def others_running() -> list[int]:
    out = subprocess.run(["pgrep", "-f", "vllm.entrypoints"], capture_output=True, text=True, timeout=10)
    return [int(pid) for pid in out.stdout.split()]


def version() -> str:
    found = sorted(HOME.glob("venv/lib/python*/site-packages/vllm*.dist-info"))
    return found[-1].name.removesuffix(".dist-info").replace("-", " ") if found else "?"


def _wait_for_others(max_wait_s: float, step: Callable[[str], None]) -> None:
    deadline = time.monotonic() + max_wait_s
    pids = others_running()
    if pids:
        step(f"another vLLM is running (pids {pids}, not ours): waiting up to {max_wait_s:g} s")
    while pids:
        if time.monotonic() > deadline:
            raise RuntimeError(f"another vLLM (pids {pids}) still runs after {max_wait_s:g} s; try later")
        time.sleep(5)
        pids = others_running()


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except OSError:
        return False
    return True


def _stop(pid: int) -> None:
    """stop.sh when the PID file names our server; else TERM then KILL its process group."""
    with contextlib.suppress(OSError, ValueError):
        if int(PID_FILE.read_text().strip()) == pid:
            subprocess.run([str(SCRIPTS / "stop.sh")], capture_output=True, timeout=60)
    if _group_alive(pid):
        with contextlib.suppress(OSError):
            os.killpg(pid, signal.SIGTERM)
        deadline = time.monotonic() + 30
        while _group_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.5)
        with contextlib.suppress(OSError):
            os.killpg(pid, signal.SIGKILL)


@contextlib.contextmanager
def vllm_server(
    children: Children, port: int, step: Callable[[str], None], max_wait_s: float = 600
) -> Iterator[VllmServer]:
    """Waits for any other vLLM to go, runs setup.sh (idempotent) and serve.sh on `port`, yields
    the running server and stops it however the block ends."""
    _wait_for_others(max_wait_s, step)
    subprocess.run([str(SCRIPTS / "setup.sh")], capture_output=True, timeout=120, check=True)
    step(f"starting vLLM on port {port} (serve.sh, about a minute)")
    env = {**os.environ, "SLUICEGATE_VLLM_PORT": str(port), "SLUICEGATE_VLLM_WAIT": "240"}
    serve = subprocess.Popen(
        [str(SCRIPTS / "serve.sh")],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # Ctrl-C reaches only this run, which then stops the server
    )
    assert serve.stdout is not None
    pid: int | None = None
    said: list[str] = []
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            ready, _, _ = select.select([serve.stdout], [], [], 1.0)
            if not ready:
                continue
            line = serve.stdout.readline().decode(errors="replace")
            if not line:
                break  # serve.sh has exited
            said.append(line.rstrip())
            if line.startswith("vLLM pid ") and pid is None:
                pid = int(line.split()[2].rstrip(","))
        if serve.wait(timeout=5) != 0 or pid is None:
            raise RuntimeError("serve.sh failed:\n" + "\n".join(said[-40:]))
        server = VllmServer(pid, f"http://127.0.0.1:{port}")
        children.on_kill.append(hook := lambda: os.killpg(server.pid, signal.SIGKILL))
        yield server
        children.on_kill.remove(hook)
    finally:
        if pid is None:  # interrupted before serve.sh said the pid: it is in the PID file
            with contextlib.suppress(OSError, ValueError):
                candidate = int(PID_FILE.read_text().strip())
                if candidate in find_pids(parent=serve.pid):
                    pid = candidate
        if serve.poll() is None:
            with contextlib.suppress(OSError):
                os.killpg(serve.pid, signal.SIGKILL)
            serve.wait(timeout=5)
        serve.stdout.close()
        if pid is not None:
            step("stopping vLLM")
            _stop(pid)
