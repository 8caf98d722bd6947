"""py-spy: sample the gateway during extra load phases, and summarize the collapsed stacks."""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from harness.cpu import NOISE_CORES
from harness.load import Load, Target


def find_py_spy() -> str | None:
    spy = shutil.which("py-spy")
    if spy is None and os.access(Path(sys.executable).parent / "py-spy", os.X_OK):
        spy = str(Path(sys.executable).parent / "py-spy")
    return spy


async def profile_phases(
    load: Load,
    gateway: Target,
    phases: list[tuple[str, bytes, int, bool]],
    duration_s: float,
    out_dir: Path,
    spy: str,
    step: Callable[[str], None],
    pid: int | None = None,
) -> dict[str, str]:
    """For each (name, body, concurrency, stream): a saturation phase (not in the table) with py-spy
    sampling the gateway (or process `pid`, the server behind `gateway`). Returns, per phase, the
    collapsed-stack file py-spy wrote, or an error message starting with '!'."""
    summaries: dict[str, str] = {}
    sampled = pid or load.gateway_pid
    monitor = load.monitor
    for name, body, concurrency, stream in phases:
        step(f"py-spy profile: {name}, {duration_s:g} s")
        path = out_dir / f"{name}.txt"
        await monitor.wait_quiet()
        spy_proc = await asyncio.create_subprocess_exec(
            spy,
            "record",
            "--pid",
            str(sampled),
            "--rate",
            "250",
            "--duration",
            str(int(duration_s)),
            "--format",
            "raw",
            "--output",
            str(path),
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
        )
        monitor.pids.append(spy_proc.pid)
        try:
            await asyncio.sleep(0.5)
            phase = await load.phase(
                gateway,
                body,
                name=f"profile {name}",
                concurrency=concurrency,
                duration_s=duration_s - 1,
                stream=stream,
                wait_quiet=False,  # py-spy is running
            )
            async with asyncio.timeout(duration_s + 15):
                _, err = await spy_proc.communicate()
        finally:
            monitor.pids.remove(spy_proc.pid)
            if spy_proc.returncode is None:
                spy_proc.kill()
                await spy_proc.wait()
        if spy_proc.returncode != 0:
            summaries[name] = f"! py-spy failed: {err.decode(errors='replace')[-500:]}"
            continue
        summaries[name] = str(path)
        foreign = phase.foreign_cpu_s / phase.wall_s if phase.wall_s else 0.0
        if foreign > NOISE_CORES:
            summaries[name + " (noise)"] = (
                f"! other processes used {foreign:.2f} cores during the {name} profile: "
                "a descheduled process skews the samples; rerun on a quiet machine"
            )
    return summaries


def report_profiles(profiles: dict[str, str]) -> list[str]:
    out: list[str] = []
    for name, where in profiles.items():
        if name.endswith(" (noise)"):
            out.append("  " + where)
            continue
        text = where if where.startswith("!") else summarize_collapsed(Path(where))
        who = "the bare proxy" if name.startswith("bare-proxy") else "the gateway"
        out += ["", f"py-spy profile of {who}, {name} phase:", text]
    return out


def _frame_module(frame: str) -> str:
    """'handle (/x/gateway/edge/api.py:67)' -> 'gateway/edge/api.py'; a site-packages path -> its package."""
    at = frame.rfind(" (")
    path = (frame[at + 2 : -1] if at >= 0 else frame).rsplit(":", 1)[0]
    if "site-packages/" in path:
        return path.split("site-packages/", 1)[1]
    if "/gateway/" in path:
        return "gateway/" + path.rsplit("/gateway/", 1)[1]
    if "/lib/python3" in path:
        return path.split("/lib/python3", 1)[1].split("/", 1)[-1]  # asyncio/tasks.py
    return path


def _package(module: str) -> str:
    top = module.split("/", 1)[0]
    return top.removesuffix(".py") if "/" not in module else top


def _frame_function(frame: str) -> str:
    at = frame.rfind(" (")
    return f"{frame[:at]} ({_frame_module(frame)})" if at >= 0 else frame


_ENTRY_MODULES = ("gateway/cli.py", "gateway/cli/serving.py", "gateway/__main__.py")
# (label, package anywhere on the stack) first, then (label, package of the leaf frame).
_STACK_COMPONENTS = (
    ("Redis calls via redis-py (rate limit, metering, key lookup)", "redis"),
    ("upstream HTTP client (aiohttp)", "aiohttp"),
    ("Prometheus metrics (prometheus_client)", "prometheus_client"),
)
_LEAF_COMPONENTS = (
    ("HTTP server (uvicorn + httptools)", "uvicorn"),
    ("Starlette (routing, middleware, responses)", "starlette"),
    ("gateway/ code itself", "gateway"),
)
_OTHER_COMPONENT = "event loop, tasks, timeouts, rest (asyncio, uvloop C code, stdlib)"


def _component(packages: list[str]) -> str:
    for label, package in _STACK_COMPONENTS:
        if package in packages:
            return label
    for label, package in _LEAF_COMPONENTS:
        if packages[-1] == package:
            return label
    return _OTHER_COMPONENT


def summarize_collapsed(path: Path, top: int = 15) -> str:
    """Self time per function and per package, and inclusive time per gateway/ function."""
    self_fn: Counter[str] = Counter()
    self_pkg: Counter[str] = Counter()
    gateway_incl: Counter[str] = Counter()
    components: Counter[str] = Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count_raw = line.rpartition(" ")
        if not stack or not count_raw.isdigit():
            continue
        count = int(count_raw)
        frames = [f for f in stack.split(";") if not f.startswith(("process ", "thread "))]
        if not frames:
            continue
        total += count
        self_fn[_frame_function(frames[-1])] += count
        packages = [_package(_frame_module(f)) for f in frames]
        self_pkg[packages[-1]] += count
        components[_component(packages)] += count
        seen = {
            _frame_function(f)
            for f in frames
            if _frame_module(f).startswith("gateway/") and _frame_module(f) not in _ENTRY_MODULES
        }
        for name in seen:
            gateway_incl[name] += count
    if not total:
        return f"  (no samples in {path})"

    def block(title: str, counter: Counter[str], n: int = top) -> list[str]:
        return [f"  {title}"] + [f"    {100 * k / total:5.1f}%  {name}" for name, k in counter.most_common(n)]

    lines = [f"  {total} non-idle samples, collapsed stacks in {path}"]
    lines += block(
        "by component (first match: redis/aiohttp/prometheus anywhere on the stack):", components, 8
    )
    lines += block("self time by package (leaf frame; C code counts to its Python caller):", self_pkg, 10)
    lines += block("self time by function:", self_fn)
    if gateway_incl:
        lines += block("inclusive time of gateway/ functions:", gateway_incl)
    return "\n".join(lines)
