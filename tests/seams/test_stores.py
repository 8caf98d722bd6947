"""Every Redis command lives in a store (docs/architecture.md, "Stores"): outside the store modules
nothing in gateway/ imports the redis library, catches its errors or reads a store's client. A
store module is gateway/redis/*, the redis-py seam, or a module named `*store.py`; the modules
listed in HOLDS_A_CLIENT may name the client type without being stores, each for its reason."""

from __future__ import annotations

import ast
from pathlib import Path

GATEWAY = Path(__file__).resolve().parents[2] / "gateway"
# What may touch the client without being a `*store.py`: each for one reason.
HOLDS_A_CLIENT = {
    # The composition roots: they connect, build the stores and close the client.
    "gateway/app.py": "builds every store from the client it connects",
    "gateway/dev/demo.py": "a plain client for the demo's key, through the key store",
    # The key store's write steps and batched reads, split out of gateway/keys/store.py by size:
    # only KeyStore calls them, with its client.
    "gateway/keys/steps.py": "the key store's single-key scripts",
    "gateway/keys/rotation.py": "the key store's rotation steps",
    "gateway/keys/listing.py": "the key store's batched reads",
    "gateway/keys/deletion.py": "the key store's team deletion steps",
    "gateway/keys/creation.py": "the key store's key creation steps",
}
# The modules that are the Redis client and its plumbing (no store).
_CLIENT_MODULES = (
    "gateway.redis.client",
    "gateway.redis.scripts",
    "gateway.redis.lean",
    "gateway.redis.subscribe",
)


def _shown(path: Path) -> str:
    return path.relative_to(GATEWAY.parent).as_posix()


def is_store(shown: str) -> bool:
    return (
        shown.startswith("gateway/redis/")
        or shown == "gateway/seams/redis_pool.py"
        or shown.rsplit("/", 1)[-1].endswith("store.py")
    )


def redis_uses(source: str, shown: str) -> list[str]:
    """`shown:line: what` for each import of the redis library, each mention of RedisError (a
    handler catching it), each import of the client's modules, and each `.redis` read (a store's
    client) in a module that is not a store."""
    tree = ast.parse(source, shown)
    found: list[str] = []
    client_allowed = shown in HOLDS_A_CLIENT
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if (
                    alias.name == "redis"
                    or alias.name.startswith("redis.")
                    or (alias.name.startswith(_CLIENT_MODULES) and not client_allowed)
                ):
                    found.append(f"{shown}:{node.lineno}: import {alias.name}")
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module is not None:
            if (
                node.module == "redis"
                or node.module.startswith("redis.")
                or (node.module.startswith(_CLIENT_MODULES) and not client_allowed)
            ):
                found.append(f"{shown}:{node.lineno}: from {node.module} import ...")
        elif isinstance(node, ast.Name) and node.id == "RedisError":
            found.append(f"{shown}:{node.lineno}: RedisError")
        elif isinstance(node, ast.Attribute) and node.attr in ("RedisError", "redis") and not client_allowed:
            found.append(f"{shown}:{node.lineno}: .{node.attr}")
    return found


def test_nothing_outside_the_stores_imports_redis_or_catches_its_errors() -> None:
    found: list[str] = []
    for path in sorted(GATEWAY.rglob("*.py")):
        shown = _shown(path)
        if not is_store(shown):
            found += redis_uses(path.read_text(encoding="utf-8"), shown)
    assert not found, "Redis outside the stores (move it into the concern's store):\n" + "\n".join(found)


def test_the_scan_finds_each_kind_of_use() -> None:
    """The scan is not vacuous: each way a module could reach Redis is named, with its module."""
    source = (
        "import redis\n"
        "from redis.exceptions import RedisError\n"
        "from gateway.redis.client import RedisClient\n"
        "async def f(store):\n"
        "    try:\n"
        "        await store.redis.get('k')\n"
        "    except RedisError:\n"
        "        pass\n"
    )
    found = redis_uses(source, "gateway/proxy/somewhere.py")
    assert sorted(found) == [
        "gateway/proxy/somewhere.py:1: import redis",
        "gateway/proxy/somewhere.py:2: from redis.exceptions import ...",
        "gateway/proxy/somewhere.py:3: from gateway.redis.client import ...",
        "gateway/proxy/somewhere.py:6: .redis",
        "gateway/proxy/somewhere.py:7: RedisError",
    ]
    assert is_store("gateway/keys/store.py")
    assert is_store("gateway/routing/vtc_store.py")
    assert not is_store("gateway/routing/vtc.py")


def test_every_store_class_lives_in_a_store_module() -> None:
    """A RedisStore subclass outside a store module would hide commands from the scan above."""
    misplaced: list[str] = []
    for path in sorted(GATEWAY.rglob("*.py")):
        shown = _shown(path)
        tree = ast.parse(path.read_text(encoding="utf-8"), shown)
        classes = [node for node in ast.walk(tree) if isinstance(node, ast.ClassDef)]
        for node in classes:
            bases = {base.id for base in node.bases if isinstance(base, ast.Name)}
            if "RedisStore" in bases and not is_store(shown):
                misplaced.append(f"{shown}: {node.name}")
    assert not misplaced, "RedisStore subclasses outside a *store.py module:\n" + "\n".join(misplaced)
