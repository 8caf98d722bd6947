"""The real engine: Reframr's own runtime, loaded from its model repository.

The `reframr` package is not on PyPI; it ships inside the model repository next to
`model.safetensors`, needs Python >= 3.13 and numpy, numba and scipy. So `--model-dir DIR` must be a
checkout of the whole repository (e.g. a volume mounted into the pod), and the worker must run on a
3.13 interpreter. Every way this can be wrong is a `RuntimeUnavailable` with a message that says
which, raised before the server starts where that is cheap (`check`), else while loading.

Reframr's `generate_text` returns the whole answer and no tokenizer is exposed, so this engine is
buffered and its usage is estimated; see `workers.reframr.engine`.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any

MIN_PYTHON = (3, 13)
WEIGHTS = "model.safetensors"


class RuntimeUnavailable(RuntimeError):
    """Reframr's runtime cannot run here; the message says why and what to do."""


def check(model_dir: Path, python: tuple[int, int] = sys.version_info[:2]) -> Path:
    """The weights file, once the interpreter, the directory, the weights and the package are there."""
    if python < MIN_PYTHON:
        raise RuntimeUnavailable(
            "Reframr's runtime needs Python >= 3.13; this worker runs on Python "
            f"{python[0]}.{python[1]}. Start it with a 3.13 interpreter, or use --engine test."
        )
    if not model_dir.is_dir():
        raise RuntimeUnavailable(f"--model-dir {model_dir} is not a directory")
    weights = model_dir / WEIGHTS
    if not weights.is_file():
        raise RuntimeUnavailable(f"no {WEIGHTS} in {model_dir}: point --model-dir at the model repository")
    package = model_dir / "reframr"
    if not (package / "__init__.py").is_file():
        raise RuntimeUnavailable(
            f"no `reframr` package in {model_dir}: it ships inside the model repository, so check out the "
            "whole repository, not only the weights"
        )
    return weights


class ReframrRuntime:
    """A loaded `ReframrModel` behind the engine interface."""

    def __init__(self, model: Any) -> None:
        self._model = model

    def generate_text(
        self,
        context: str,
        max_tokens: int,
        reasoning_mode: str | None,
        temperature: float,
        top_k: int,
        top_p: float,
        repetition_penalty: float,
    ) -> str:
        text = self._model.generate_text(
            context,
            max_tokens=max_tokens,
            reasoning_mode=reasoning_mode,
            temperature=temperature,
            top_k=top_k,
            top_p=top_p,
            repetition_penalty=repetition_penalty,
        )
        return str(text)


def load(model_dir: Path, python: tuple[int, int] = sys.version_info[:2]) -> ReframrRuntime:
    """Import `reframr` from `model_dir` and load its weights (slow: seconds to minutes)."""
    weights = check(model_dir, python)
    # The package is only importable from the repository itself; the path entry stays for the life
    # of the process, since the loaded model keeps importing its own submodules.
    if str(model_dir) not in sys.path:
        sys.path.insert(0, str(model_dir))
    try:
        module = importlib.import_module("reframr")
    except ImportError as exc:
        raise RuntimeUnavailable(
            f"cannot import reframr from {model_dir}: {exc} (it needs numpy, numba and scipy)"
        ) from exc
    model_class = getattr(module, "ReframrModel", None)
    if model_class is None:
        raise RuntimeUnavailable(f"{module.__file__} has no ReframrModel: an unsupported Reframr version?")
    return ReframrRuntime(model_class.load(weights))
