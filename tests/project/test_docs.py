"""The README and docs/: every relative link names a file of the repository and, with
``#anchor``, a heading of that file (GitHub's anchors); the README stays a user's page
(under 300 lines: the reference lives in docs/); neither names the project's issues by
number ("issue N", "(issues N, M)"): a reader has no tracker to look them up in, and
the text must say what it means (another project's issue, "PCP issue #N", is a
reference and stays); nor do the sources (package, tests, benchmarks, scripts), nor findings or
rounds by number: a comment or docstring says what a thing is or guards, not its
history; nor are the pages run logs: no dates ("2026-12-02", "2 Dec", "December
2"), times of day ("17:19 UTC") or "this session" / "last run": a measurement says what
was measured, where and with which command, and a dated log goes to benchmarks/results/
(CHANGELOG.md keeps its release dates)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

CHECKOUT = Path(__file__).resolve().parents[2]
PAGES = [CHECKOUT / "README.md", *sorted((CHECKOUT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")
ISSUE = re.compile(r"\b[Ii]ssues? \d+(?:(?:, | and )\d+)*")
HISTORY = re.compile(
    r"\b(?:[Ii]ssues?|[Ff]indings?|[Rr]ounds?) \d+(?:(?:, | and )\d+)*"
    r"|\b(?:first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|last) round\b"
)
SOURCES = sorted(
    p
    for tree in ("pmda_mmv", "tests", "benchmarks", "fuzz", "soak", "examples")
    for p in (CHECKOUT / tree).rglob("*.py")
) + sorted(p for p in (CHECKOUT / "scripts").iterdir() if p.is_file())


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


MONTH = (
    r"(?:Jan(?:uary)?|Feb(?:ruary)?|Mar(?:ch)?|Apr(?:il)?|May|June?|July?|Aug(?:ust)?"
    r"|Sep(?:t(?:ember)?)?|Oct(?:ober)?|Nov(?:ember)?|Dec(?:ember)?)"
)
DATED = re.compile(
    r"\b(?:19|20)\d\d-\d\d-\d\d\b"  # 2026-12-02
    rf"|\b{MONTH}\.? \d{{1,2}}(?:st|nd|rd|th)?\b"  # Dec 2, December 2nd
    rf"|\b\d{{1,2}}(?:st|nd|rd|th)? (?:of )?{MONTH}\b"  # 2 Dec, 2nd of December
    r"|\b\d\d?:\d\d(?:-\d\d?:\d\d)? UTC\b"  # 17:19 UTC, 16:37-16:43 UTC
    r"|\b(?:in |during )?this session\b|\b[Ll]ast (?:full )?(?:runs?|results?)\b"
)


def test_the_readme_is_a_users_page() -> None:
    """Under 300 lines (the reference lives in docs/)."""
    text = (CHECKOUT / "README.md").read_text()
    assert len(text.splitlines()) < 300, len(text.splitlines())


def matches(page: Path, pattern: re.Pattern[str]) -> list[str]:
    """Every match of ``pattern`` in ``page``, as ``page:line: match``."""
    return [
        f"{page.name}:{n}: {m.group(0)}"
        for n, line in enumerate(page.read_text().splitlines(), 1)
        for m in pattern.finditer(line)
    ]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(CHECKOUT).as_posix())
def test_no_dated_run_logs(page: Path) -> None:
    assert matches(page, DATED) == []


def test_the_date_pattern_finds_what_it_should() -> None:
    text = (
        "measured 2026-12-02; on 2 Dec and on Dec 2, December 2nd, the 3rd of March; "
        "16:37-16:43 UTC; in this session; Last run: 5 s; the last results; "
        "May we; 2 decks; 12:30 s; 10 Mar"
    )
    assert DATED.findall(text) == [
        "2026-12-02",
        "2 Dec",
        "Dec 2",
        "December 2nd",
        "3rd of March",
        "16:37-16:43 UTC",
        "in this session",
        "Last run",
        "last results",
        "10 Mar",
    ]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(CHECKOUT).as_posix())
def test_no_issue_numbers(page: Path) -> None:
    assert matches(page, ISSUE) == []


def test_the_issue_pattern_finds_what_it_should() -> None:
    n, m, k = 17, 16, 5
    found = ISSUE.findall(f"as issue {n} asks (issues {m}, {n}; issues {k} and 6); PCP issue #{n}")
    assert found == [f"issue {n}", f"issues {m}, {n}", f"issues {k} and 6"]


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.relative_to(CHECKOUT).as_posix())
def test_no_history_numbers_in_code_or_tests(source: Path) -> None:
    assert matches(source, HISTORY) == []


def test_the_history_pattern_finds_what_it_should() -> None:
    n, k, j, nth = 28, 5, 1, "fourth"
    text = (
        f"(issue {n}, finding {k}) Findings {j}, {k} and {j}; Round {n}; the {nth} round; "
        f"PCP issue #{n}; rounding {k}; round robin; a found {k}"
    )
    assert HISTORY.findall(text) == [
        f"issue {n}",
        f"finding {k}",
        f"Findings {j}, {k} and {j}",
        f"Round {n}",
        f"{nth} round",
    ]


MODULES = {p.stem: p for p in sorted((CHECKOUT / "pmda_mmv").rglob("*.py"))}
CODE_NAME = re.compile(r"`([a-z_]+)\.([A-Za-z_]\w*)`")
NOT_CODE = {"py", "x"}  # file names (`cli.py`) and a metric name (`control.x`)


def stale_code_names(text: str) -> list[str]:
    """Each ``module.NAME`` in backquotes whose module is one of the package's (by its
    file name) and whose NAME that module's source does not hold: a name moved or renamed
    without the text following."""
    stale = []
    for module, name in CODE_NAME.findall(text):
        path = MODULES.get(module)
        if name in NOT_CODE:
            continue
        if path is not None and not re.search(rf"\b{name}\b", path.read_text()):
            stale.append(f"{module}.{name}")
    return stale


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(CHECKOUT).as_posix())
def test_code_names_exist(page: Path) -> None:
    assert stale_code_names(page.read_text()) == []


def test_the_code_name_check_finds_what_it_should() -> None:
    text = "`scanner.MAX_DIRTY` `resources.MAX_NAMES` `scanner.MAX_NAMES` `cli.py` `control.x`"
    assert stale_code_names(text) == ["scanner.MAX_NAMES"]
