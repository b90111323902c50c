"""The README and docs/: every relative link names a file of the repository and, with
``#anchor``, a heading of that file (GitHub's anchors); the README stays a user's page
(under 300 lines: the reference lives in docs/)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

CHECKOUT = Path(__file__).resolve().parents[2]
PAGES = [CHECKOUT / "README.md", *sorted((CHECKOUT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def anchors(page: Path) -> set[str]:
    """GitHub's anchors of the headings of ``page``."""
    found = set()
    for heading in re.findall(r"(?m)^#+ (.*)$", page.read_text()):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        found.add(slug)
    return found


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(CHECKOUT).as_posix())
def test_relative_links_resolve(page: Path) -> None:
    broken = []
    for target in LINK.findall(page.read_text()):
        if re.match(r"[a-z]+:", target):
            continue  # http(s), mailto
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        unknown = anchor and file.suffix == ".md" and anchor not in anchors(file)
        if not file.exists() or unknown:
            broken.append(target)
    assert not broken, broken


def test_the_readme_is_a_users_page() -> None:
    lines = (CHECKOUT / "README.md").read_text().splitlines()
    assert len(lines) < 300, len(lines)
