"""Every relative link in README.md and docs/*.md names a file that exists and, with a #fragment, a heading
in it (GitHub's anchor rule), so moving a section between pages cannot leave a dead link behind."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [
    ROOT / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
    ROOT / "helm" / "sluicegate" / "README.md",
]

# [text](target) and ![alt](target); a target has no spaces (an optional "title" after one is ignored).
LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^\s*(```|~~~)")
INLINE_CODE = re.compile(r"`[^`]*`")


def prose_lines(text: str, keep_code: bool = False) -> list[str]:
    """The lines outside fenced code, inline code dropped unless kept (a link shown as code is not one)."""
    lines, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(line if keep_code else INLINE_CODE.sub("", line))
    return lines


def anchors(text: str) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation but - and _ dropped, spaces as -, repeats -1, -2."""
    seen: dict[str, int] = {}
    found = set()
    for line in prose_lines(text, keep_code=True):
        heading = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not heading:
            continue
        slug = re.sub(r"[^\w\- ]", "", heading.group(1).lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def relative_links(path: Path) -> list[str]:
    return [
        target
        for line in prose_lines(path.read_text())
        for target in LINK.findall(line)
        if not re.match(r"^[a-z][a-z0-9+.-]*:", target)  # http:, https:, mailto:
    ]


def test_the_pages_have_links() -> None:
    # The check below must see something: the README's table of contents alone links every docs page.
    readme = relative_links(ROOT / "README.md")
    for page in PAGES[1:-1]:
        assert any(t.split("#")[0] == f"docs/{page.name}" for t in readme), (
            f"{page.name} not in the README's contents"
        )


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page: Path) -> None:
    broken = []
    for target in relative_links(page):
        file_part, _, fragment = target.partition("#")
        dest = (page.parent / file_part).resolve() if file_part else page
        if not dest.exists():
            broken.append(
                f"{target}: no file {dest.relative_to(ROOT) if dest.is_relative_to(ROOT) else dest}"
            )
        elif fragment and dest.suffix == ".md" and fragment not in anchors(dest.read_text()):
            broken.append(f"{target}: no heading #{fragment} in {dest.relative_to(ROOT)}")
    assert not broken, f"{page.relative_to(ROOT)}: {broken}"


def test_the_anchor_rule() -> None:
    # The rule above, on headings this repository has.
    text = "# Output caps: limits bound a turn instead of refusing it\n## `gateway.adminPort`\n## A\n## A\n"
    assert anchors(text) == {
        "output-caps-limits-bound-a-turn-instead-of-refusing-it",
        "gatewayadminport",
        "a",
        "a-1",
    }
