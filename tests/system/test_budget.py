"""Bounded work under pmcd: under pmcd's default agent timeout, no population of hostile
files gets the agent dropped, stops a good file's answers, floods the log, or makes
``pmda-mmv check`` print an unbounded report.

One private pmcd started with its default agent timeout (5 s: no ``-t``, as the system pmcd
runs) serves one directory with pmda-mmv (tests/support/served.py :func:`serve`).  A real
writer (python3-pcp ``pcp.mmv``) keeps ``good`` live.  Each test puts one attack beside it
(built by tests/support/hostile.py with the byte builder), then: every fetch of the good
file answers the value just written, the agent is the same process throughout, the agent's
log grows by at most 1 MB, and ``pmda-mmv check`` on each hostile file prints a bounded
report.  Run time belongs in benchmarks/hostile.py, not here.  The same bounds without pmcd:
tests/unit/directory/test_scanner_bounds.py, tests/unit/agent/test_ratelimit.py.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from pmda_mmv.agent.ratelimit import PER_CAUSE
from pmda_mmv.mmvfile import layout, limits
from tests.support import hostile, mmvbuild
from tests.support.commands import assert_terminal_safe, pmda_mmv
from tests.support.served import Served, serve
from tests.support.sweep import sweep

LOG_GROWTH = 1 << 20  # bytes the agent's log may grow by per attack
REPORT_LINES = limits.MAX_PROBLEMS + 3  # check: status line, problems, summary


@pytest.fixture(scope="module")
def served(request: pytest.FixtureRequest) -> Iterator[Served]:
    """The agent the attacks go to, one after the other."""
    yield from serve(request)


@pytest.fixture(scope="module")
def explains(request: pytest.FixtureRequest) -> Iterator[Served]:
    """Another agent, for the tests that count log lines: the attacks fill the first one's
    log limits (ratelimit.TOTAL lines a minute) on purpose."""
    yield from serve(request)


def assert_bounded_check(path: Path) -> None:
    """``pmda-mmv check FILE`` (text and JSON) reports at most REPORT_LINES lines, each of
    bounded length, and says how many problems it did not list."""
    text = pmda_mmv("check", str(path))
    lines = text.splitlines()
    assert 1 <= len(lines) <= REPORT_LINES, text[:4000]
    assert all(len(ln) < 1000 for ln in lines), max(lines, key=len)[:200]
    assert len(pmda_mmv("check", "--json", str(path))) < 64 * 1024
    assert_terminal_safe(text)


@pytest.mark.pmcd
@pytest.mark.parametrize("attack", list(hostile.ATTACKS))
def test_attack_leaves_the_good_file_served(served: Served, attack: str) -> None:
    before = served.log_size()
    paths = hostile.ATTACKS[attack](served.dir)
    try:
        served.assert_good_answers()
        # requests that reach the hostile files too: every name, value, help text and label
        # (pminfo -fTl's requests, without its printing: tests/support/sweep.py)
        swept = sweep(served.pmcd.host)
        assert swept.names >= 1 and swept.values >= 1, swept
        for path in paths:
            os.utime(path)  # touched: loaded again, logged again within the limits
        served.assert_good_answers()
        assert served.log_size() - before <= LOG_GROWTH
        assert_terminal_safe(served.pmcd.agent_log()[before:])
        for path in paths[:3]:
            assert_bounded_check(path)
    finally:
        for path in paths:
            path.unlink()
    served.assert_good_answers()


@pytest.mark.pmcd
def test_ten_thousand_files_at_once_are_served_over_several_requests(served: Served) -> None:
    """10,000 files appearing at once: the requests that find them load them within the
    budget, the rest are pending in the status metrics, and every one is served in the
    end, while the good file answers every fetch and pmcd never drops the agent."""
    paths = hostile.many_files(served.dir, 10_000)
    try:
        states = served.pmcd.run("pminfo", "-f", "mmv.control.file.state", timeout=120)
        assert '"pending"' in states.stdout, states.stdout[-2000:]
        for _ in range(1000):
            served.assert_good_answers()
            out = served.pmcd.run("pmprobe", "-v", "mmv.control.files").stdout.split()
            if out[-1] == str(len(paths) + 1):
                break
        else:
            pytest.fail(f"served files: {out}")
        states = served.pmcd.run("pminfo", "-f", "mmv.control.file.state", timeout=120)
        assert states.stdout.count('"ok"') == len(paths) + 1, states.stdout[-2000:]
        assert '"pending"' not in states.stdout
    finally:
        for path in paths:
            path.unlink()
    served.assert_good_answers()


@pytest.mark.pmcd
def test_files_rewritten_in_a_loop_leave_the_good_file_served(served: Served) -> None:
    """Small files rewritten with a new generation over and over beside 100 files of
    1,000 metrics: the good file answers every fetch, the agent is never dropped."""
    big: list[Path] = []
    for f in range(100):
        b = mmvbuild.MmvBuilder(cluster=500 + f)
        b.metrics += [mmvbuild.Metric(f"m{j}", j, layout.TYPE_U64) for j in range(1000)]
        b.values += [mmvbuild.Value(f"m{j}", None, j) for j in range(1000)]
        big.append(served.dir / f"served{f:03d}")
        b.write(big[-1])
    loop = [served.dir / f"loop{k}" for k in range(10)]
    stop = threading.Event()

    def rewrite() -> None:
        generation = 0x5F5E1000000001
        while not stop.is_set():
            for k, path in enumerate(loop):
                generation += 1
                b = mmvbuild.MmvBuilder(cluster=700 + k, generation=generation)
                b.metrics.append(mmvbuild.Metric("v", 1, layout.TYPE_U64))
                b.values.append(mmvbuild.Value("v", None, generation))
                tmp = path.with_name("." + path.name)
                b.write(tmp)
                tmp.rename(path)

    writer = threading.Thread(target=rewrite, daemon=True)
    writer.start()
    try:
        for _ in range(4):
            served.assert_good_answers()
    finally:
        stop.set()
        writer.join()
        for path in [*big, *loop]:
            path.unlink(missing_ok=True)
    served.assert_good_answers()


@pytest.mark.pmcd
def test_reloads_of_a_bad_file_log_within_the_limits(explains: Served) -> None:
    """A file of 20,000 orphan values loaded six times: its one cause is logged at most
    PER_CAUSE times, not 20,000 times per load."""
    (path,) = hostile.orphan_values(explains.dir, 20_000)
    try:
        for k in range(6):
            os.utime(path, (k, k))
            explains.assert_good_answers()
        cause = [ln for ln in explains.log_lines(path) if "is not an accepted metric entry" in ln]
        assert 1 <= len(cause) <= PER_CAUSE, cause
    finally:
        path.unlink()


@pytest.mark.pmcd
@pytest.mark.parametrize("nested", [False, True], ids=["flat", "map"])
def test_label_set_libpcp_rejects_is_refused_once_naming_the_file(
    explains: Served, nested: bool
) -> None:
    """Labels that merge into a set libpcp rejects (255 names or more) are refused with
    one log line naming the file; the file's other labels and values are served, label
    requests log nothing more, and a set of 254 (libpcp's largest) is served whole."""
    # clusters of their own per case: a departed file keeps its cluster (docs/identity.md),
    # and a file moved off it would log that too
    clusters = (216, 217) if nested else (206, 207)
    count = 255 if nested else 400
    (bad,) = hostile.label_flood(explains.dir, count, nested=nested, cluster=clusters[0])
    (edge,) = hostile.label_flood(explains.dir, 254, nested=nested, cluster=clusters[1])
    try:
        explains.assert_good_answers()
        lines = explains.log_lines(bad)
        assert len(lines) == 1 and "labels" in lines[0] and "libpcp" in lines[0], lines
        size = explains.log_size()
        for _ in range(3):
            shown = explains.pmcd.run("pminfo", "-l", f"mmv.{bad.name}.v", f"mmv.{edge.name}.v")
            assert shown.returncode == 0, shown.stderr
        assert explains.log_size() == size, explains.pmcd.agent_log()[size:]
        first = "n0" if nested else "l0"
        last = "n253" if nested else "l253"
        text = shown.stdout.split(f"mmv.{edge.name}.v")[1]
        assert f'"{first}":' in text and f'"{last}":' in text, text[:500]
        assert f'"{first}":' not in shown.stdout.split(f"mmv.{edge.name}.v")[0]
    finally:
        bad.unlink()
        edge.unlink()
