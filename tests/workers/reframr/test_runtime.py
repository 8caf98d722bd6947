"""The real runtime's loader (which cannot run here: no Python 3.13, no package, no weights) and the
command line."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from tests.servers import free_port, run_uvicorn
from tests.workers.reframr.support import MODEL, call, chat, wait_for
from workers.reframr import create_app, runtime
from workers.reframr.engine import EngineLoader

pytestmark = pytest.mark.timeout(10)
REPO_ROOT = Path(__file__).resolve().parents[3]
STUB = """
class ReframrModel:
    @classmethod
    def load(cls, path):
        return cls()

    def generate_text(self, context, max_tokens=120, reasoning_mode=None, temperature=0.58,
                      top_k=64, top_p=0.92, repetition_penalty=1.25):
        return f"stub saw {context!r} mode={reasoning_mode} max={max_tokens} top_k={top_k}"
"""


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    (tmp_path / runtime.WEIGHTS).write_bytes(b"not really safetensors")
    (tmp_path / "reframr").mkdir()
    return tmp_path


@pytest.fixture
def isolated_import(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Whatever `reframr` a test imports is forgotten afterwards."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    yield
    sys.modules.pop("reframr", None)


def test_this_python_is_refused_with_a_clear_message(model_dir: Path) -> None:
    if sys.version_info >= (3, 13):
        pytest.skip("this interpreter can run Reframr")
    with pytest.raises(
        runtime.RuntimeUnavailable, match=r"needs Python >= 3\.13; this worker runs on Python 3\.1"
    ):
        runtime.load(model_dir)


def test_each_missing_piece_is_named(tmp_path: Path) -> None:
    py313 = (3, 13)
    with pytest.raises(runtime.RuntimeUnavailable, match="is not a directory"):
        runtime.check(tmp_path / "absent", py313)
    with pytest.raises(runtime.RuntimeUnavailable, match=r"no model\.safetensors"):
        runtime.check(tmp_path, py313)
    (tmp_path / runtime.WEIGHTS).touch()
    with pytest.raises(runtime.RuntimeUnavailable, match=r"no `reframr` package .* whole repository"):
        runtime.check(tmp_path, py313)


@pytest.mark.usefixtures("isolated_import")
def test_a_package_that_cannot_import_is_reported(model_dir: Path) -> None:
    (model_dir / "reframr" / "__init__.py").write_text("import numba_that_is_not_installed\n")
    with pytest.raises(runtime.RuntimeUnavailable, match=r"cannot import reframr .* numba"):
        runtime.load(model_dir, (3, 13))


@pytest.mark.usefixtures("isolated_import")
def test_the_loader_drives_a_reframr_shaped_package(model_dir: Path) -> None:
    """Everything but the version gate, against a stub with `ReframrModel`'s documented interface."""
    (model_dir / "reframr" / "__init__.py").write_text(textwrap.dedent(STUB))
    engine = runtime.load(model_dir, (3, 13))
    with run_uvicorn(create_app(engine, MODEL)) as url:
        status, headers, raw = call(url, "POST", "/v1/chat/completions", chat("hi", reasoning_mode="deep"))
        assert status == 200
        assert headers["x-usage-estimated"] == "true"
        content = orjson.loads(raw)["choices"][0]["message"]["content"]
        assert content == "stub saw 'User: hi\\n\\nAssistant:' mode=deep max=120 top_k=64"


def test_a_loader_failure_is_served_as_failed_health(model_dir: Path) -> None:
    app = create_app(EngineLoader(lambda: runtime.load(model_dir, (3, 11))), MODEL)
    with run_uvicorn(app) as url:
        wait_for(
            lambda: call(url, "GET", "/health")[0] == 503 and b"failed" in call(url, "GET", "/health")[2]
        )
        assert "Python >= 3.13" in orjson.loads(call(url, "GET", "/health")[2])["error"]


def _cli(*args: str, timeout: float = 8) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "workers.reframr", "--model-name", MODEL, *args]
    return subprocess.run(
        command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=timeout, check=False
    )


def test_cli_refuses_a_model_dir_it_cannot_serve(model_dir: Path) -> None:
    done = _cli("--model-dir", str(model_dir))
    assert done.returncode == 2
    expected = "Python >= 3.13" if sys.version_info < (3, 13) else "no `reframr` package"
    assert expected in done.stderr
    assert _cli("--engine", "test", "--max-queue", "-1").returncode == 2


def test_cli_serves_the_test_engine() -> None:
    port = free_port()
    command = [sys.executable, "-m", "workers.reframr", "--host", "127.0.0.1", "--port", str(port)]
    command += ["--model-name", MODEL, "--engine", "test-buffered", "--max-queue", "2"]
    with subprocess.Popen(command, cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) as proc:
        try:
            url = f"http://127.0.0.1:{port}"

            def healthy() -> bool:
                assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
                try:
                    return call(url, "GET", "/health")[0] == 200
                except OSError:
                    return False

            wait_for(healthy, timeout_s=8)
            status, headers, _ = call(url, "POST", "/v1/completions", {"model": MODEL, "prompt": "x"})
            assert status == 200
            assert headers["x-usage-estimated"] == "true"
        finally:
            proc.terminate()
            proc.wait(timeout=5)
