"""Which worker package may import which: the production Reframr worker never depends on the fake
worker (a test double), and the shared `workers.common` depends on neither.

Read from the source with `ast`, so an import inside a function or under `TYPE_CHECKING` counts too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

WORKERS = Path(__file__).resolve().parents[2] / "workers"


def _module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path, root: Path = WORKERS) -> set[str]:
    """Every module `path` (a file under the `workers` package at `root`) imports, relative imports
    resolved; `from a import b` yields `a` and `a.b` (b may be a submodule)."""
    name = _module_name(path, root)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names)
    return found


def imports_of(package: str) -> dict[str, set[str]]:
    return {
        str(path.relative_to(WORKERS.parent)): imported_modules(path)
        for path in sorted((WORKERS / package).rglob("*.py"))
    }


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


@pytest.mark.parametrize(
    ("package", "forbidden"),
    [
        ("reframr", ("workers.fake",)),
        ("common", ("workers.fake", "workers.reframr", "workers.conformance")),
    ],
)
def test_package_does_not_import(package: str, forbidden: tuple[str, ...]) -> None:
    imports = imports_of(package)
    assert imports, f"no modules found under workers/{package}"
    offending = {
        path: sorted(m for m in modules if any(_within(m, f) for f in forbidden))
        for path, modules in imports.items()
    }
    assert {path: found for path, found in offending.items() if found} == {}


def test_the_reframr_worker_frames_with_the_shared_package() -> None:
    # The scan above sees these very imports, so an empty result there is not a blind scanner.
    seen = set().union(*imports_of("reframr").values())
    assert {"workers.common.framing", "workers.common.errors", "workers.common.streaming"} <= seen


def test_the_scanner_resolves_every_import_form(tmp_path: Path) -> None:
    root = tmp_path / "workers"
    (root / "reframr").mkdir(parents=True)
    module = root / "reframr" / "mod.py"
    module.write_text(
        "import workers.fake.app\n"
        "from workers import fake\n"
        "from ..fake import plan\n"
        "def f():\n"
        "    from workers.fake.generation import token_text\n"
    )
    found = imported_modules(module, root)
    assert {"workers.fake.app", "workers.fake", "workers.fake.plan", "workers.fake.generation"} <= found
