"""CI policy plugin: with ``--fail-on-skip`` (the default when ``CI=true``) a run that skipped
any test fails (exit status 1), so that a test whose requirement is missing in CI (pmcd,
python3-pcp, watchdog, psutil, the pcp-testsuite files ...) cannot pass by being skipped."""

from __future__ import annotations

import os

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--fail-on-skip",
        action="store_true",
        default=os.environ.get("CI", "").lower() == "true",
        help="exit 1 when any test was skipped (default when CI=true)",
    )


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if not session.config.getoption("--fail-on-skip"):
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    skipped = len(reporter.stats.get("skipped", [])) if reporter is not None else 0
    if skipped and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
        if reporter is not None:
            reporter.write_line(f"--fail-on-skip: {skipped} test(s) skipped; failing the run")
