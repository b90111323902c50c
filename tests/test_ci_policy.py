"""The CI policy plugins: a skipped test fails the run under --fail-on-skip or CI=true
(tests/ci.py), and system_pmcd tests run only when selected (tests/pmcd.py).  Each case
runs a small pytest session in a subprocess with the plugin loaded."""

from __future__ import annotations

import pytest

from tests.pmcd import CHECKOUT

SKIPPING = """
import pytest

def test_passes():
    assert True

def test_skips():
    pytest.skip("requirement missing")
"""

MARKED = """
import pytest

@pytest.mark.system_pmcd
def test_changes_the_system_pmcd():
    assert True

def test_plain():
    assert True
"""


@pytest.fixture
def session(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    monkeypatch.setenv("PYTHONPATH", str(CHECKOUT))
    monkeypatch.delenv("CI", raising=False)
    return pytester


@pytest.mark.parametrize(
    ("args", "ci", "status"),
    [([], None, 0), (["--fail-on-skip"], None, 1), ([], "true", 1)],
)
def test_skips_fail_the_run_when_asked(
    session: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
    args: list[str],
    ci: str | None,
    status: int,
) -> None:
    if ci:
        monkeypatch.setenv("CI", ci)
    session.makepyfile(test_sample=SKIPPING)
    result = session.runpytest_subprocess("-p", "tests.ci", *args)
    result.assert_outcomes(passed=1, skipped=1)
    assert result.ret == status


@pytest.mark.parametrize(
    ("args", "ci", "ran"),
    [
        ([], None, 1),
        (["--system-pmcd"], None, 2),
        (["-m", "system_pmcd"], None, 1),
        ([], "true", 2),
    ],
)
def test_system_pmcd_tests_run_only_when_selected(
    session: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
    args: list[str],
    ci: str | None,
    ran: int,
) -> None:
    if ci:
        monkeypatch.setenv("CI", ci)
    session.makepyfile(test_sample=MARKED)
    result = session.runpytest_subprocess("-p", "tests.pmcd", "--strict-markers", *args)
    result.assert_outcomes(passed=ran, deselected=2 - ran)
