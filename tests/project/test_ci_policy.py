"""The CI policy plugins: a skipped test fails the run under --fail-on-skip or CI=true
(tests/support/ci.py), and system_pmcd tests run only when selected explicitly, never because of
CI=true (tests/support/pmcd.py); a test that leaves a thread running fails
(tests/conftest.py); a test that starts a private pmcd without the ``pmcd`` marker fails
(tests/support/pmcd.py).  Each case runs a small pytest session in a subprocess with the plugin
loaded."""

from __future__ import annotations

import pytest

from tests.support.pmcd import CHECKOUT

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
    result = session.runpytest_subprocess("-p", "tests.support.ci", *args)
    result.assert_outcomes(passed=1, skipped=1)
    assert result.ret == status


@pytest.mark.parametrize(
    ("args", "ci", "ran"),
    [
        ([], None, 1),
        (["--system-pmcd"], None, 2),
        (["-m", "system_pmcd"], None, 1),
        ([], "true", 1),  # CI=true alone must not rewrite the system pmcd.conf
        (["--system-pmcd", "--fail-on-skip"], "true", 2),  # what .ci/run passes
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
    result = session.runpytest_subprocess(
        "-p", "tests.support.pmcd", "-p", "tests.support.ci", "--strict-markers", *args
    )
    result.assert_outcomes(passed=ran, deselected=2 - ran)


LEAKING = """
import threading

from tests.conftest import no_thread_leak  # noqa: F401

STOP = threading.Event()


def test_leaves_a_thread() -> None:
    threading.Thread(target=STOP.wait, name="left-behind").start()


def test_stops_its_thread() -> None:
    thread = threading.Thread(target=STOP.wait)
    thread.start()
    STOP.set()
    thread.join()


def test_leaves_a_daemon_thread() -> None:
    threading.Thread(target=threading.Event().wait, daemon=True).start()
"""

WATCHING = """
from tests.conftest import no_thread_leak  # noqa: F401

from pmda_mmv.directory.watcher import Watcher


def test_leaves_an_observer(tmp_path) -> None:
    Watcher(str(tmp_path), lambda name: None).ensure()  # a daemon thread, but an observer


def test_stops_its_observer(tmp_path) -> None:
    watcher = Watcher(str(tmp_path), lambda name: None)
    watcher.ensure()
    watcher.stop()
"""


def test_a_thread_left_running_fails_the_test(session: pytest.Pytester) -> None:
    session.makepyfile(test_sample=LEAKING)
    result = session.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=3, errors=1)
    result.stdout.fnmatch_lines(["*threads left running: <Thread(left-behind*"])


def test_an_observer_left_running_fails_the_test(session: pytest.Pytester) -> None:
    session.makepyfile(test_sample=WATCHING)
    result = session.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=2, errors=1)
    result.stdout.fnmatch_lines(["*ERROR at teardown of test_leaves_an_observer*"])


UNMARKED = """
import pytest

from tests.support.pmcd import PrivatePmcd


def test_starts_a_pmcd_unmarked(tmp_path) -> None:
    PrivatePmcd(tmp_path, ()).start()


def test_asks_for_the_factory_unmarked(private_pmcd) -> None:
    pass


@pytest.mark.pmcd
def test_marked_may_ask_for_the_factory(private_pmcd) -> None:
    pass
"""


def test_a_test_starting_a_pmcd_must_be_marked_pmcd(session: pytest.Pytester) -> None:
    """So that ``-m "not pmcd"`` starts no pmcd: the marker is checked where a pmcd starts
    (module fixtures too), not guessed from the fixtures a test asks for."""
    session.makeini("[pytest]\nmarkers =\n    pmcd: starts a private pmcd\n")
    session.makepyfile(test_sample=UNMARKED)
    result = session.runpytest_subprocess("-p", "tests.support.pmcd", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1, errors=1)
    result.stdout.fnmatch_lines(["*test_starts_a_pmcd_unmarked starts a private pmcd: mark it*"])
    result.stdout.fnmatch_lines(["*test_asks_for_the_factory_unmarked starts a private pmcd*"])
