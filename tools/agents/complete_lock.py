"""Add the opencode platform packages that `npm install --package-lock-only` left out to
tests/agents/package-lock.json.

The registry this project reaches serves only the platform packages of this machine's kind
(linux-x64), so npm writes a lockfile without the others, and `npm ci` then refuses it ("Missing:
opencode-darwin-arm64@ from lock file"). Each missing optional dependency is added with its os,
cpu (and libc) fields, so `npm ci` sees the lock in sync and skips it as foreign to the platform
without fetching anything.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

LOCK = Path(__file__).resolve().parents[2] / "tests" / "agents" / "package-lock.json"


def platform(name: str) -> dict[str, list[str]]:
    """os / cpu / libc of a platform package named like `opencode-linux-x64-baseline-musl`."""
    parts = name.split("-")
    os_name = {"windows": "win32"}.get(parts[1], parts[1])
    fields = {"os": [os_name], "cpu": [parts[2]]}
    fields["libc"] = ["musl"] if "musl" in parts else (["glibc"] if os_name == "linux" else [])
    return {key: value for key, value in fields.items() if value}


def main() -> int:
    lock = json.loads(LOCK.read_text())
    packages = lock["packages"]
    added = []
    for entry in list(packages.values()):
        for dep, version in (entry.get("optionalDependencies") or {}).items():
            key = f"node_modules/{dep}"
            if key not in packages and dep.startswith("opencode-"):
                packages[key] = {"version": version, "optional": True, **platform(dep)}
                added.append(key)
    lock["packages"] = dict(sorted(packages.items(), key=lambda item: item[0]))
    LOCK.write_text(json.dumps(lock, indent=2) + "\n")
    print(f"complete_lock: added {len(added)} platform entries", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
