"""Render the coding agents' pass matrix into docs/agents.md, between its matrix markers.

    .venv/bin/python -m pytest tests/agents --agents-results=tests/agents/results.json
    .venv/bin/python tools/agents/matrix.py          # rewrite the block
    .venv/bin/python tools/agents/matrix.py --check  # exit 1 when the block is stale

The source is tests/agents/results.json (cells `agent|version|pool kind|feature` -> pass/fail), which
the agent tests compare their outcomes with; tests/agents/test_matrix.py checks the block equals
what this renders. CI never rewrites either.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "tests" / "agents" / "results.json"
DOC = ROOT / "docs" / "agents.md"
BEGIN, END = "<!-- matrix:begin -->", "<!-- matrix:end -->"
FEATURES = ("plain", "tool", "continued", "usage", "30k tokens/min key")
HEADINGS = {
    "plain": "plain turn",
    "tool": "tool round trip",
    "continued": "continued session",
    "usage": "usage metered exactly",
    "30k tokens/min key": "30k tokens/min key",
}
MARKS = {"pass": "pass", "fail": "**fail**"}


def render(cells: dict[str, str]) -> str:
    rows: dict[tuple[str, str, str], dict[str, str]] = {}
    for cell, outcome in cells.items():
        agent, version, pool, feature = cell.split("|")
        rows.setdefault((agent, version, pool), {})[feature] = outcome
    head = ["agent", "version", "pool kind", *(HEADINGS[f] for f in FEATURES)]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for (agent, version, pool), outcomes in sorted(rows.items()):
        marks = [MARKS.get(outcomes[f], outcomes[f]) if f in outcomes else "-" for f in FEATURES]
        lines.append("| " + " | ".join([agent, version, pool, *marks]) + " |")
    return "\n".join(lines)


def rendered_doc(doc: str, cells: dict[str, str]) -> str:
    before, rest = doc.split(BEGIN, 1)
    _, after = rest.split(END, 1)
    return f"{before}{BEGIN}\n{render(cells)}\n{END}{after}"


def load_cells() -> dict[str, str]:
    cells: dict[str, str] = json.loads(RESULTS.read_text())["cells"]
    return cells


def main(argv: list[str]) -> int:
    doc = DOC.read_text()
    want = rendered_doc(doc, load_cells())
    if "--check" in argv:
        if want != doc:
            print(
                f"{DOC.relative_to(ROOT)}: the pass matrix is stale; run tools/agents/matrix.py",
                file=sys.stderr,
            )
            return 1
        return 0
    DOC.write_text(want)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
