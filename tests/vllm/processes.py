"""The processes behind a local vLLM, found through Linux's /proc, and a way to freeze its engine.

vLLM's API server (the process listening on the port) hands generations to an engine-core process
and its worker, its descendants. Stopping those with SIGSTOP freezes generation while the API
server still answers HTTP and sees clients leave: a test can then let a disconnect reach vLLM
while vLLM cannot get ahead of it, however fast the machine.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType

from tests.waiting import wait_until

PROC = Path("/proc")
_LISTEN = "0A"  # TCP state in /proc/net/tcp


def _listening_inodes(port: int) -> set[str]:
    inodes = set()
    for table in ("tcp", "tcp6"):
        path = PROC / "net" / table
        if not path.exists():
            continue
        for line in path.read_text().splitlines()[1:]:
            fields = line.split()
            local_port = int(fields[1].rsplit(":", 1)[1], 16)
            if local_port == port and fields[3] == _LISTEN:
                inodes.add(fields[9])
    return inodes


def _pids() -> list[int]:
    return [int(entry.name) for entry in PROC.iterdir() if entry.name.isdigit()]


def listening_pid(port: int) -> int | None:
    """The process listening on `port`, if it is one this user can see."""
    wanted = {f"socket:[{inode}]" for inode in _listening_inodes(port)}
    for pid in _pids():
        with contextlib.suppress(OSError):
            for fd in (PROC / str(pid) / "fd").iterdir():
                with contextlib.suppress(OSError):
                    if os.readlink(fd) in wanted:
                        return pid
    return None


def _stat(path: Path) -> tuple[str, int]:
    """(state, parent pid) from a /proc .../stat file; the command name may hold spaces and ')'."""
    fields = path.read_text().rsplit(")", 1)[1].split()
    return fields[0], int(fields[1])


def descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for other in _pids():
        with contextlib.suppress(OSError, ValueError, IndexError):
            children.setdefault(_stat(PROC / str(other) / "stat")[1], []).append(other)
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _stopped(pid: int) -> bool:
    """Every thread of `pid` is stopped (a process that is gone counts as stopped)."""
    try:
        return all(_stat(task / "stat")[0] == "T" for task in (PROC / str(pid) / "task").iterdir())
    except OSError:
        return True


class Frozen:
    """Processes to stop on `freeze()`; every one is continued again when the `with` block ends."""

    def __init__(self, pids: list[int]) -> None:
        if not pids:
            raise ValueError("nothing to freeze")
        if os.getpid() in pids:
            raise ValueError("refusing to freeze this test process")
        self.pids = pids
        self.frozen = False

    def freeze(self) -> None:
        self.frozen = True
        for pid in self.pids:
            os.kill(pid, signal.SIGSTOP)
        # SIGSTOP lands asynchronously: go on only once the kernel shows every thread stopped.
        wait_until(lambda: all(_stopped(pid) for pid in self.pids), 10, what="the processes to stop")

    def __enter__(self) -> Frozen:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self.frozen:
            for pid in self.pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)


@contextlib.contextmanager
def engine_of(port: int) -> Iterator[Frozen | None]:
    """The engine processes of the vLLM listening on `port`, ready to freeze; None when that
    vLLM is not a process tree this user can see (e.g. another host's)."""
    server = listening_pid(port)
    engine = descendants(server) if server is not None else []
    if not engine:
        yield None
        return
    with Frozen(engine) as frozen:
        yield frozen
