"""A throwaway `redis-server` child process on a free loopback port (the demo and the tests).

It keeps nothing on disk and dies with its parent's context, so it never touches data it did not
create and never collides with a Redis already running on 6379.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from types import TracebackType

INSTALL_HINT = (
    "redis-server is not on PATH. Install it, then run this again:\n"
    "  Debian/Ubuntu: sudo apt-get install -y redis-server\n"
    "  macOS:         brew install redis\n"
    "or point SLUICEGATE_REDIS_URL at an existing Redis."
)


class RedisNotInstalledError(RuntimeError):
    pass


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class EmbeddedRedis:
    """`data_dir` (kept, never cleaned up) turns on an fsync-always append-only file, so a Redis
    killed and started again on the same port and directory comes back with every acknowledged
    write, like a production Redis with persistence."""

    def __init__(
        self,
        port: int | None = None,
        *,
        startup_timeout_s: float = 10.0,
        data_dir: str | None = None,
        own_process_group: bool = False,
    ) -> None:
        self.port = port or _free_port()
        # The demo's: a terminal's Ctrl-C reaches its whole process group, and Redis must outlive
        # the gateway's drain (which still writes usage), then be stopped by it (gateway/dev/demo.py).
        self._own_process_group = own_process_group
        self._startup_timeout_s = startup_timeout_s
        self._data_dir = data_dir
        self._process: subprocess.Popen[bytes] | None = None
        self._workdir: tempfile.TemporaryDirectory[str] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def pid(self) -> int:
        if self._process is None:
            raise RuntimeError("redis-server is not running")
        return self._process.pid

    def start(self) -> EmbeddedRedis:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RedisNotInstalledError(INSTALL_HINT)
        directory = self._data_dir
        if directory is None:
            self._workdir = tempfile.TemporaryDirectory(prefix="sluicegate-redis-")
            directory = self._workdir.name
        self._process = subprocess.Popen(
            [
                binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "yes" if self._data_dir else "no",
                "--appendfsync",
                "always",
                "--dir",
                directory,
                "--protected-mode",
                "yes",
                "--loglevel",
                "warning",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            process_group=0 if self._own_process_group else None,
        )
        deadline = time.monotonic() + self._startup_timeout_s
        while not self._answers_ping():
            if self._process.poll() is not None:
                stderr = self._process.stderr.read().decode(errors="replace") if self._process.stderr else ""
                self.stop()
                raise RuntimeError(f"redis-server exited at start on port {self.port}: {stderr.strip()}")
            if time.monotonic() > deadline:
                self.stop()
                raise TimeoutError(f"redis-server did not answer on port {self.port}")
            time.sleep(0.02)
        return self

    def _answers_ping(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def stop(self) -> None:
        if self._process is not None:
            if self._process.poll() is None:
                self._process.terminate()
                try:
                    self._process.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    self._process.kill()
                    self._process.wait(timeout=5)
            if self._process.stderr is not None:
                self._process.stderr.close()
            self._process = None
        if self._workdir is not None:
            self._workdir.cleanup()
            self._workdir = None

    def __enter__(self) -> EmbeddedRedis:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
