"""/proc accounting: CPU and memory of processes, CPU used by everything else, pinning, machine facts."""

from __future__ import annotations

import asyncio
import contextlib
import os
import platform
import subprocess
from importlib.metadata import version
from pathlib import Path

CLK_TCK = os.sysconf("SC_CLK_TCK")
NOISE_CORES = 0.15  # foreign CPU above this (in cores) during a phase gets a warning
REPO = Path(__file__).resolve().parents[2]


def _stat_fields(pid: int) -> tuple[str, list[str]]:
    """(comm, the fields after it) of /proc/<pid>/stat; fields[0] is the state."""
    raw = Path(f"/proc/{pid}/stat").read_text()
    return raw[raw.index("(") + 1 : raw.rindex(")")], raw[raw.rindex(")") + 2 :].split()


def cpu_seconds(pid: int) -> float:
    """utime + stime of the whole process (all threads), from /proc/<pid>/stat."""
    fields = _stat_fields(pid)[1]
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def cpu_seconds_of(pids: list[int]) -> float:
    """The sum over processes that may have exited (those count 0)."""
    total = 0.0
    for pid in pids:
        with contextlib.suppress(OSError):
            total += cpu_seconds(pid)
    return total


def memory_kib(pid: int) -> dict[str, int]:
    out: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            out[name] = int(value.split()[0])
    return out


def find_pids(*, parent: int | None = None, comm: str | None = None, group: int | None = None) -> list[int]:
    """Processes with that parent, command name and process group (each test only when given)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            name, fields = _stat_fields(int(entry))
        except OSError:
            continue
        if (
            (parent is None or int(fields[1]) == parent)
            and (comm is None or name == comm)
            and (group is None or int(fields[2]) == group)
        ):
            found.append(int(entry))
    return found


def pin(pid: int, cpus: set[int] | None) -> None:
    """Pins every thread of `pid` (sched_setaffinity applies per thread on Linux)."""
    if not cpus:
        return
    try:
        tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        tids = [pid]
    for tid in tids:
        with contextlib.suppress(OSError):
            os.sched_setaffinity(tid, cpus)


class Monitor:
    """CPU used on the whole machine versus by this benchmark's own processes: the difference is
    load from elsewhere (other jobs, the kernel's softirq threads) that disturbs the numbers."""

    def __init__(self, pids: list[int], quiet_budget_s: float = 0.0) -> None:
        self.pids = pids
        self.quiet_budget_s = quiet_budget_s
        self.waited_s = 0.0
        self.gave_up = False

    async def wait_quiet(self, window_s: float = 0.3) -> None:
        """Before a phase (our processes idle): wait until the machine is quiet for one window,
        spending at most `quiet_budget_s` over the whole run."""
        while self.waited_s < self.quiet_budget_s:
            before = self.snapshot()
            await asyncio.sleep(window_s)
            after = self.snapshot()
            self.waited_s += window_s
            if (after[0] - before[0]) - (after[1] - before[1]) < NOISE_CORES * window_s:
                return
        if self.quiet_budget_s > 0:
            self.gave_up = True

    def snapshot(self) -> tuple[float, float, float]:
        """(user+system CPU seconds of the machine, CPU seconds of our processes, steal seconds).
        irq/softirq time is left out on both sides: the kernel may account loopback traffic there."""
        fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        user, nice, system = fields[:3]
        steal = fields[7] if len(fields) > 7 else 0
        return (user + nice + system) / CLK_TCK, cpu_seconds_of(self.pids), steal / CLK_TCK


def split_cpus(no_pin: bool) -> tuple[list[int], set[int] | None, set[int] | None]:
    """(usable CPUs, the gateway's CPU, everything else's CPUs); no pinning with fewer than 2 CPUs."""
    usable = sorted(os.sched_getaffinity(0))
    if len(usable) >= 2 and not no_pin:
        return usable, {usable[0]}, set(usable[1:])
    return usable, None, None


def _git(*args: str) -> str:
    # The checkout whose gateway runs: SLUICEGATE_BENCH_GATEWAY_SRC when set (harness/procs.py).
    checkout = os.environ.get("SLUICEGATE_BENCH_GATEWAY_SRC") or str(REPO)
    return subprocess.run(
        ["git", "-C", checkout, *args], capture_output=True, text=True, timeout=5
    ).stdout.strip()


def machine_facts(usable: list[int], pinning: str, extra: tuple[str, ...] = ()) -> list[str]:
    model = "?"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    versions = []
    for dist in ("uvicorn", "starlette", "aiohttp", "uvloop", "redis", "orjson"):
        with contextlib.suppress(Exception):
            versions.append(f"{dist} {version(dist)}")
    commit = "?"
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        head = _git("rev-parse", "--short", "HEAD")
        dirty = _git("status", "--porcelain", "--", "gateway")
        commit = head + (" with uncommitted changes in gateway/" if dirty else "") if head else "?"
    return [
        f"gateway: git {commit}",
        f"machine: {os.cpu_count()} cores ({len(usable)} usable), {model}",
        f"kernel:  {platform.system()} {platform.release()}",
        f"python:  {platform.python_implementation()} {platform.python_version()}; " + ", ".join(versions),
        *extra,
        f"pinning: {pinning}",
    ]
