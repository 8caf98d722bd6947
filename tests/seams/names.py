"""The one check every seam test makes: each private or undocumented name its seam relies on is
still there in the installed release, else a failure naming the library, its version and the
attribute (the message a maintainer bumping a pin reads: docs/testing.md, `make seams-latest`)."""

from __future__ import annotations

from importlib.metadata import version


def missing(distribution: str, owner: object, names: tuple[str, ...] | list[str]) -> list[str]:
    """The names `owner` lacks, each said with the library's name and version."""
    shown = getattr(owner, "__qualname__", type(owner).__qualname__)
    release = f"{distribution} {version(distribution)}"
    return [f"{release}: {shown} has no attribute {name!r}" for name in names if not hasattr(owner, name)]


def assert_present(distribution: str, owner: object, names: tuple[str, ...] | list[str]) -> None:
    gone = missing(distribution, owner, names)
    assert not gone, "a seam relies on what this release removed:\n" + "\n".join(gone)
