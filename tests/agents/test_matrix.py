"""The pass matrix in docs/agents.md is what tools/agents/matrix.py renders from the committed results,
and the golden bodies of the pinned agent versions are there (no npm needed)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

from tests.agents import agents

ROOT = Path(__file__).resolve().parents[2]


def _matrix() -> ModuleType:
    spec = importlib.util.spec_from_file_location("agents_matrix", ROOT / "tools" / "agents" / "matrix.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_docs_matrix_is_what_matrix_py_renders_from_the_results() -> None:
    matrix = _matrix()
    doc = matrix.DOC.read_text()
    assert doc == matrix.rendered_doc(doc, matrix.load_cells()), "run tools/agents/matrix.py"


def test_a_failed_cell_is_shown_as_failed() -> None:
    table = _matrix().render({"A|1|native|plain": "pass", "A|1|native|tool": "fail"})
    assert "| A | 1 | native | pass | **fail** | - | - | - |" in table


def test_every_results_cell_names_a_pinned_version() -> None:
    pinned = set(agents.pinned_versions().values())
    for cell in _matrix().load_cells():
        assert cell.split("|")[1] in pinned, f"{cell}: not a pinned version (re-run the agent tests)"


def test_each_pinned_agent_has_golden_bodies_for_every_turn() -> None:
    golden = ROOT / "tests" / "agents" / "golden"
    for name, variant in (("claude", ""), ("codex", ""), ("opencode-openai", ""), ("opencode-anthropic", "")):
        package = agents.PACKAGES[name.split("-")[0]]
        stem = f"{name}{variant}-{agents.pinned_versions()[package]}"
        for turn in ("plain", "tool", "continued"):
            files = sorted(golden.glob(f"{stem}-{turn}-*.json"))
            assert files, f"no golden body {stem}-{turn}: run tools/agents/capture.py"
            for path in files:
                body = json.loads(path.read_text())["body"]
                # Vendor prompt text is replaced, structure kept.
                assert not any(len(s) > 40 and set(s) != {"x"} for s in _strings(body)), path.name


def _strings(value: object) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [s for item in value for s in _strings(item)]
    if isinstance(value, dict):
        return [s for item in value.values() for s in _strings(item)]
    return []
