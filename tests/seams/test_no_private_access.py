"""Nothing in gateway/ outside gateway/seams/ touches another library's private attribute: every
`x._name` read or written there names something the same module defines (a method, a class
attribute, a `__slots__` entry, an attribute it assigns on self). Another library's internals go
through its seam (docs/architecture.md, "Seams"), which tests/seams/test_<library>.py checks
against the installed release."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

GATEWAY = Path(__file__).resolve().parents[2] / "gateway"
SEAMS = GATEWAY / "seams"
# Leading-underscore names that are public API: namedtuple's documented methods.
PUBLIC_UNDERSCORED = frozenset({"_replace", "_asdict", "_fields", "_make", "_field_defaults"})
_ACCESSORS = frozenset({"getattr", "setattr", "hasattr", "delattr"})


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__") and name not in PUBLIC_UNDERSCORED


def _foreign(module: str | None) -> bool:
    return module is not None and not module.startswith("gateway") and module != "__future__"


def _own_names(tree: ast.Module) -> set[str]:
    """The private names this module defines: functions and classes, names bound at class or
    module level (`__slots__` entries too), and attributes it assigns on self, cls or any object
    of its own classes (`x._name = ...`)."""
    own: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            own.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            own.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store | ast.Del):
            if isinstance(node.value, ast.Name) and node.value.id in {"self", "cls"}:
                own.add(node.attr)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            slots = any(isinstance(t, ast.Name) and t.id == "__slots__" for t in targets)
            if slots and node.value is not None:
                own.update(
                    c.value
                    for c in ast.walk(node.value)
                    if isinstance(c, ast.Constant) and isinstance(c.value, str)
                )
    return own


def foreign_private_uses(source: str, shown_as: str) -> list[str]:
    """`shown_as:line: expression` for each private name the module reaches that it does not
    define."""
    tree = ast.parse(source, shown_as)
    own = _own_names(tree)
    found: list[str] = []
    for node in ast.walk(tree):
        name: str | None = None
        if isinstance(node, ast.Attribute) and _private(node.attr) and node.attr not in own:
            name = f"{ast.unparse(node.value)}.{node.attr}"
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in _ACCESSORS
            and len(node.args) > 1
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
            and _private(node.args[1].value)
        ):
            name = f"{node.func.id}(..., {node.args[1].value!r})"
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and _foreign(node.module):
            hidden = [alias.name for alias in node.names if _private(alias.name)]
            if any(_private(part) for part in str(node.module).split(".")):
                name = f"from {node.module} import ..."
            elif hidden:
                name = f"from {node.module} import {', '.join(hidden)}"
        if name is not None:
            found.append(f"{shown_as}:{getattr(node, 'lineno', 0)}: {name}")
    return found


def test_no_module_outside_the_seams_touches_a_private_name_it_does_not_define() -> None:
    found = [
        use
        for path in sorted(GATEWAY.rglob("*.py"))
        if SEAMS not in path.parents
        for use in foreign_private_uses(path.read_text(), str(path.relative_to(GATEWAY.parent)))
    ]
    assert not found, "private names of other code, outside gateway/seams/:\n" + "\n".join(found)


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("import x\nx.conn._writer = None\n", ["x.conn._writer"]),
        ("class A(B):\n    def f(self):\n        self._unset()\n", ["self._unset"]),
        ("v = getattr(obj, '_client')\n", ["getattr(..., '_client')"]),
        ("from redis.asyncio.connection import _Parser\n", ["from redis.asyncio.connection import _Parser"]),
        ("from opentelemetry.sdk.trace import _Span\n", ["from opentelemetry.sdk.trace import _Span"]),
        ("class A:\n    __slots__ = ('_n',)\n    def f(self, o: 'A'):\n        return o._n\n", []),
        (
            "class A:\n    def f(self):\n        self._x = 1\n        return self._x, self._g()\n"
            "    def _g(self): ...\n",
            [],
        ),
        ("p = p._replace(a=1)\n", []),
    ],
)
def test_the_scan_tells_foreign_privates_from_own_ones(source: str, expected: list[str]) -> None:
    """The scan itself: it catches a private reached on another object, inherited from another
    library's class, fetched by name or imported, and lets a module's own privates be."""
    found = [use.split(": ", 1)[1] for use in foreign_private_uses(source, "probe.py")]
    assert found == expected
