"""Shared pytest fixtures.  Each block belongs to the tests named in its heading."""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import mmvbuild
from tests.support.writers import cases, reference
from tests.support.writers.corpus import write_corpus

# ==== reader / check / dump fixtures (test_reader*.py, test_inspect.py) ====================


@pytest.fixture(scope="session")
def mmv_corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The real-writer corpus (:mod:`tests.support.writers`: libpcp_mmv, pcp.mmv, PCP::MMV and the
    pcp-testsuite captures), each case with the C reference's mmvdump and pminfo output."""
    out = tmp_path_factory.mktemp("corpus")
    write_corpus(out)
    return out


@pytest.fixture(scope="session")
def captured_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The pcp-testsuite captures (two Parfait, one pcp.mmv), decompressed."""
    out = tmp_path_factory.mktemp("captured")
    files = {}
    for name in cases.CAPTURES:
        files[name] = out / name
        files[name].write_bytes(cases.capture(name))
    return files


@pytest.fixture
def pcp_mmv_file(tmp_path: Path) -> Iterator[mmvbuild.Written]:
    """A file written by python3-pcp's pcp.mmv in tmp_path; the writer stays live."""
    written = mmvbuild.write_pcp_mmv(tmp_path / "pywriter")
    yield written
    written.handle.stop()


@pytest.fixture
def capi_file(tmp_path: Path) -> mmvbuild.Written:
    """A v3 file with labels written by libpcp_mmv's registry API (ctypes) in tmp_path."""
    return mmvbuild.write_capi(tmp_path / "capi")


@pytest.fixture(scope="session")
def c_reference() -> tuple[str, str]:
    """(pminfo, path of the C pmda_mmv.so): the C reference agent loaded in a local context."""
    pminfo = shutil.which("pminfo")
    if pminfo is None or reference.missing():
        pytest.fail(f"pminfo or the C reference missing: {reference.missing()} (package pcp)")
    return pminfo, str(reference.C_DSO)


# ==== end of reader / check / dump fixtures ================================================


# ==== every test: no thread left running ===================================================
# As watchdog's own tests do: a test that starts an observer (pmda_mmv.directory.watcher) or any
# non-daemon thread must stop it.  Threads started before the test (by session fixtures)
# are not its own.

THREAD_GRACE = 5.0
"""Seconds a test's threads get to finish after it (a stopped observer may still be
joining its emitters); only then is one that still runs a leak."""


def _leaks_of(before: set[threading.Thread]) -> list[threading.Thread]:
    from watchdog.utils import BaseThread  # observers and their emitters

    return [
        t
        for t in threading.enumerate()
        if t not in before and t.is_alive() and (not t.daemon or isinstance(t, BaseThread))
    ]


@pytest.fixture(autouse=True)
def no_thread_leak() -> Iterator[None]:
    """Fail the test that leaves a new non-daemon thread or a watchdog thread running."""
    before = set(threading.enumerate())
    yield
    deadline = time.monotonic() + THREAD_GRACE
    leaks = _leaks_of(before)
    for thread in leaks:
        thread.join(max(0.0, deadline - time.monotonic()))
    leaks = _leaks_of(before)
    if leaks:
        pytest.fail(f"threads left running: {', '.join(repr(t) for t in leaks)}")
