"""Seams: the only modules of the gateway that use another library's private attributes or
undocumented behaviour, one module per library. Each module's docstring names what it relies on
and why; tests/seams/ checks every such name against the installed release, and pyproject.toml
pins each library to the minor version those tests ran on (docs/architecture.md, "Seams";
docs/testing.md, `make seams-latest`)."""
