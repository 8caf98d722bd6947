"""Where a server's memory per open stream goes: tracemalloc snapshots of the gateway (run under
harness/traced_main.py), diffed between idle and N open streams, by file, by line and by the
allocating call path. tracemalloc sees every allocation through Python's allocators (objects,
buffers, uvloop's and aiohttp's PyMem calls); what RSS adds beyond it is malloc'd directly by C
code, allocator slack and fragmentation."""

from __future__ import annotations

import asyncio
import sys
import tracemalloc
from pathlib import Path

TRACED_MAIN = Path(__file__).resolve().parent / "traced_main.py"
_NOISE = (
    tracemalloc.Filter(False, tracemalloc.__file__),
    tracemalloc.Filter(False, "<frozen importlib._bootstrap>"),
    tracemalloc.Filter(False, "<frozen importlib._bootstrap_external>"),
    tracemalloc.Filter(False, "<unknown>"),
)
_SITE = "site-packages/"


def wrap(folder: Path, frames: int) -> tuple[str, ...]:
    """`gateway_stack(wrap=...)` for a gateway whose snapshots land in `folder`."""
    return (sys.executable, str(TRACED_MAIN), str(folder), str(frames))


async def start(folder: Path, timeout_s: float = 30.0) -> None:
    """Starts tracing in the traced process."""
    request = folder / "start.req"
    request.touch()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while request.exists():
        if loop.time() > deadline:
            raise TimeoutError(f"tracemalloc did not start within {timeout_s} s")
        await asyncio.sleep(0.1)


async def snapshot(folder: Path, name: str, timeout_s: float = 120.0) -> tracemalloc.Snapshot:
    """Asks the traced process for a snapshot and loads it."""
    target = folder / f"{name}.snap"
    (folder / f"{name}.req").touch()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not target.exists():
        if loop.time() > deadline:
            raise TimeoutError(f"no tracemalloc snapshot {name} within {timeout_s} s")
        await asyncio.sleep(0.2)
    return tracemalloc.Snapshot.load(str(target)).filter_traces(_NOISE)


def short(filename: str) -> str:
    """A path from site-packages or the checkout on, not the machine's prefix."""
    if _SITE in filename:
        return filename.split(_SITE, 1)[1]
    for root in ("/gateway/", "/bench/"):
        if root in filename:
            return root[1:] + filename.split(root, 1)[1]
    return filename.rsplit("/lib/", 1)[-1]


def _frames(trace: tracemalloc.Traceback, depth: int) -> str:
    """The innermost frame, then the nearest `depth - 1` frames in gateway/ code (who holds it)."""
    frames = list(reversed(trace))  # a Traceback runs from the oldest frame to the most recent
    inner = frames[0]
    ours = [f for f in frames[1:] if "/gateway/" in f.filename][: depth - 1]
    return " <- ".join(f"{short(f.filename)}:{f.lineno}" for f in [inner, *ours])


def breakdown(before: tracemalloc.Snapshot, after: tracemalloc.Snapshot, streams: int, top: int) -> list[str]:
    """Bytes and blocks per stream that `after` holds beyond `before`, grouped three ways."""
    lines: list[str] = []
    total = sum(s.size_diff for s in after.compare_to(before, "filename"))
    lines.append(f"traced by Python's allocators: {total / streams / 1024:.1f} KiB per stream")
    for key, title in (("filename", "by file"), ("lineno", "by line")):
        lines.append(f"{title} (KiB per stream, blocks per stream):")
        for stat in after.compare_to(before, key)[:top]:
            if stat.size_diff <= 0:
                break
            frame = stat.traceback[0]
            where = short(frame.filename) + ("" if key == "filename" else f":{frame.lineno}")
            lines.append(
                f"  {stat.size_diff / streams / 1024:7.2f}  {stat.count_diff / streams:6.1f}  {where}"
            )
    lines.append("by allocating line and the gateway/ frames above it (KiB per stream):")
    grouped: dict[str, int] = {}
    for stat in after.compare_to(before, "traceback"):
        if stat.size_diff > 0:
            where = _frames(stat.traceback, 3)
            grouped[where] = grouped.get(where, 0) + stat.size_diff
    for where, size in sorted(grouped.items(), key=lambda item: -item[1])[:top]:
        lines.append(f"  {size / streams / 1024:7.2f}  {where}")
    return lines
