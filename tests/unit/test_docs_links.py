"""Every relative link in README.md and docs/*.md (and the Python client's README) points at a file of the
repository, and a link's #anchor at a heading of that file, as GitHub renders them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = sorted([ROOT / "README.md", ROOT / "clients" / "python" / "README.md", *(ROOT / "docs").glob("*.md")])
# [text](target) outside code; the target ends at the first blank or closing parenthesis.
_LINK = re.compile(r"(?<!\!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
_IMAGE = re.compile(r"!\[[^\]]*\]\(([^)\s]+)\)")
_FENCE = re.compile(r"^(```|~~~)")


def _prose(text: str) -> str:
    """The text without fenced code blocks or inline code spans, where brackets are not links."""
    lines, fenced = [], False
    for line in text.splitlines():
        if _FENCE.match(line.strip()):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(re.sub(r"`[^`]*`", "", line))
    return "\n".join(lines)


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"`|\*\*|__", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    anchors = set()
    for line in _prose(path.read_text()).splitlines():
        match = re.match(r"#{1,6}\s+(.*)", line)
        if match:
            slug = _slug(match.group(1))
            count = seen.get(slug, 0)
            anchors.add(slug if count == 0 else f"{slug}-{count}")
            seen[slug] = count + 1
    return anchors


def _links(path: Path) -> list[str]:
    prose = _prose(path.read_text())
    return [*_LINK.findall(prose), *_IMAGE.findall(prose)]


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(document: Path) -> None:
    broken = []
    for target in _links(document):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto: ...
            continue
        file_part, _, anchor = target.partition("#")
        resolved = (document.parent / file_part).resolve() if file_part else document
        if not resolved.exists():
            broken.append(f"{target} -> {resolved.relative_to(ROOT) if resolved.is_relative_to(ROOT) else resolved}"
                          " does not exist")
        elif anchor and resolved.suffix == ".md" and anchor not in _anchors(resolved):
            broken.append(f"{target}: no heading #{anchor} in {resolved.relative_to(ROOT)}")
    assert not broken, broken


def test_the_link_check_sees_links() -> None:
    assert "docs/batches.md" in _links(ROOT / "README.md")
    assert _slug("8. Rate limits (per key)") == "8-rate-limits-per-key"


def test_every_screenshot_is_shown_by_a_document() -> None:
    # a page photographed for the docs (make screenshots) that no document shows is a page the docs do not describe
    shown = {(document.parent / target).resolve() for document in DOCUMENTS for target in _IMAGE.findall(
        _prose(document.read_text()))}
    unshown = sorted(p.name for p in (ROOT / "docs" / "screenshots").glob("*.png") if p.resolve() not in shown)
    assert not unshown, unshown
