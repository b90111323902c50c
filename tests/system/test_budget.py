"""Bounded work (issue 17): under pmcd's default agent timeout, no population of hostile
files gets the agent dropped, stops a good file's answers, floods the log, or makes
``pmda-mmv check`` print an unbounded report.

One private pmcd started with its default agent timeout (5 s: no ``-t``, as the system pmcd
runs) serves one directory with pmda-mmv.  A real writer (python3-pcp ``pcp.mmv``) keeps
``good`` live.  Each test puts one attack beside it (built by tests/support/hostile.py with the byte
builder, in other sizes and constructions than the issue's), then: every fetch of the good
file answers the value just written, the agent is the same process throughout, the agent's
log grows by at most 1 MB, and ``pmda-mmv check`` on each hostile file prints a bounded
report.  Run time belongs in benchmarks/hostile.py, not here.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pmda_mmv.agent.ratelimit import PER_CAUSE, LogLimit
from pmda_mmv.directory.scanner import Scanner
from pmda_mmv.directory.watcher import Watcher
from pmda_mmv.mmvfile import layout
from pmda_mmv.mmvfile.parse.ranges import Ranges
from pmda_mmv.mmvfile.rules import printable
from pmda_mmv.namespace.catalogue import Catalogue
from tests.support import hostile, mmvbuild
from tests.support.pmcd import PrivatePmcd, kept_dir, make_dir, our_agent, require_pcp
from tests.system.test_refusals import agent_pids

GOOD = "mmv.good.py.counter"
LOG_GROWTH = 1 << 20  # bytes the agent's log may grow by per attack
FETCHES = 5  # fetches of the good file while each attack is in place
REPORT_LINES = layout.MAX_PROBLEMS + 3  # check: status line, problems, summary


@dataclass
class Served:
    pmcd: PrivatePmcd
    dir: Path
    pid: int
    good: mmvbuild.Written
    counter: int = 41

    def log_size(self) -> int:
        path = self.pmcd.log_dir / "mmv.log"
        return path.stat().st_size if path.exists() else 0

    def log_lines(self, path: Path) -> list[str]:
        return [ln for ln in self.pmcd.agent_log().splitlines() if str(path) in ln]

    def assert_good_answers(self) -> None:
        """FETCHES fetches of the good file, each the value just written, by the same
        agent process (pmcd drops an agent that misses its timeout; it is not restarted)."""
        for _ in range(FETCHES):
            self.counter += 1
            self.good.handle.lookup_set("py.counter", "", self.counter)
            out = self.pmcd.run("pmprobe", "-v", GOOD)
            assert out.stdout.strip() == f"{GOOD} 1 {self.counter}", out.stdout + out.stderr
        assert agent_pids(self.pmcd) == [self.pid], self.pmcd.pmcd_log()[-2000:]


@pytest.fixture(scope="module")
def served(request: pytest.FixtureRequest) -> Iterator[Served]:
    """The agent the attacks go to, one after the other."""
    yield from serve(request)


@pytest.fixture(scope="module")
def explains(request: pytest.FixtureRequest) -> Iterator[Served]:
    """Another agent, for the tests that count log lines: the attacks fill the first one's
    log limits (ratelimit.TOTAL lines a minute) on purpose."""
    yield from serve(request)


def serve(request: pytest.FixtureRequest) -> Iterator[Served]:
    require_pcp()
    for base in kept_dir(request, "pmda-mmv-bounded-", "bounded work directory"):
        mmv_dir = make_dir(base / "tmp" / "mmv", 0o1777)
        agent = our_agent(mmv_dir, "--status-metrics")
        pmcd = PrivatePmcd(base / "pmcd", [agent], agent_timeout=None)
        pmcd.start()
        good = mmvbuild.write_pcp_mmv(mmv_dir / "good")
        try:
            pids = agent_pids(pmcd)
            assert len(pids) == 1, pids
            s = Served(pmcd, mmv_dir, pids[0], good)
            s.assert_good_answers()
            yield s
        finally:
            pmcd.stop()
            good.handle.stop()


def pmda_mmv(*args: str) -> str:
    """Run ``python -m pmda_mmv ARGS`` and return its output (stdout, decoded as the
    terminal would: invalid bytes kept as surrogates)."""
    done = subprocess.run(
        [sys.executable, "-m", "pmda_mmv", *args], capture_output=True, timeout=300
    )
    assert done.returncode in (0, 1), done.stderr
    return done.stdout.decode("utf-8", "surrogateescape")


def assert_terminal_safe(text: str) -> None:
    """Nothing in ``text`` but printable characters and line ends."""
    for line in text.splitlines():
        assert printable(line) == line, repr(line)


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
        # requests that reach the hostile files too: every name, value and label
        for args in (("-f", "mmv"), ("-l", "mmv"), ("-T", "mmv")):
            out = served.pmcd.run("pminfo", *args, timeout=120)
            assert out.returncode == 0, out.stderr[-2000:]
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


def test_check_dump_and_debug_escape_terminal_controls(tmp_path: Path) -> None:
    """check DIR, dump FILE and debug --once show file names, help text, instance names
    and labels with every control and bidirectional character escaped."""
    served, named = hostile.escapes(tmp_path)
    outputs = {
        "check": pmda_mmv("check", str(tmp_path)),
        "check --json": pmda_mmv("check", "--json", str(tmp_path)),
        "dump": pmda_mmv("dump", str(served), str(named)),
        "dump --json": pmda_mmv("dump", "--json", str(served)),
        "debug": pmda_mmv("debug", "--once", "--dir", str(tmp_path)),
    }
    for what, text in outputs.items():
        assert_terminal_safe(text)
        assert "\\x1b" in text or "\\u001b" in text, what  # shown, escaped
    assert "\\u202e" in outputs["dump"] and "\\x9b" in outputs["dump"]


def test_watcher_ignores_the_agents_own_opens(tmp_path: Path) -> None:
    """Opening and reading files (as the agent does at every retry) queues nothing; a write
    does."""
    names = [f"f{k}" for k in range(50)]
    for n in names:
        (tmp_path / n).write_bytes(b"x")
    marks: set[str] = set()
    cond = threading.Condition()

    def mark(name: str) -> None:
        with cond:
            marks.add(name)
            cond.notify_all()

    watcher = Watcher(str(tmp_path), mark)
    watcher.ensure()
    try:
        assert watcher.mode == "inotify"
        for _ in range(3):
            for n in names:
                (tmp_path / n).read_bytes()
        (tmp_path / "written").write_bytes(b"y")  # the last event: the others came before
        with cond:
            assert cond.wait_for(lambda: "written" in marks, 10)
        assert not marks & set(names), sorted(marks & set(names))[:5]
    finally:
        watcher.stop()


def test_queued_changes_are_bounded(tmp_path: Path) -> None:
    """Marks for more names than the queue holds become one rescan of the directory."""
    scanner = Scanner(str(tmp_path), Catalogue())
    scanner.refresh()
    rescans = scanner.rescans
    for k in range(100_000):
        scanner.mark_dirty(f"gone{k}")
    scanner.refresh()
    assert scanner.rescans == rescans + 1


def test_log_limit_counts_what_it_suppresses() -> None:
    """Per file and cause: PER_CAUSE lines, then a count once the window has passed."""
    lines: list[str] = []
    now = [0.0]
    limit = LogLimit(lines.append, window=10, per_cause=2, per_file=3, clock=lambda: now[0])
    for k in range(50):
        limit(f"/d/a: values[{k}].metric at offset {k * 32}: offset 8 is not a metric")
    limit("/d/a: header.flags at offset 28: unknown flag bits 0x8 ignored")
    limit("/d/a: toc[1].type at offset 56: bad TOC type 0x9")  # past per_file
    limit("/d/b: values[0].metric at offset 0: offset 8 is not a metric")  # another file
    assert len(lines) == 4
    now[0] = 11
    limit.flush()
    assert lines[-1].startswith("/d/a: 49 more log lines about this file suppressed")
    assert len(lines) == 5


def test_log_limit_bounds_the_lines_of_all_files() -> None:
    """Many files, one line each: at most ``total`` lines a window, then one count."""
    lines: list[str] = []
    now = [0.0]
    limit = LogLimit(lines.append, window=10, total=100, clock=lambda: now[0])
    for k in range(1000):
        limit(f"/d/empty{k}: file.size at offset 0: size 0, not written yet")
    assert len(lines) == 100
    now[0] = 10
    limit("/d/next: header.g1 at offset 8: generation 0, no data yet")
    assert lines[-2] == "900 more log lines suppressed (at most 100 every 10 s)"
    assert lines[-1].startswith("/d/next: ")


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5000), st.integers(1, 60)), max_size=400))
def test_ranges_find_the_overlap_a_scan_finds(spans: list[tuple[int, int]]) -> None:
    """The reader's sorted ranges (sections, indoms' instances) answer as a scan of every
    accepted range would, in whatever order ranges come; blocks (of 2 here) split often."""
    ranges = Ranges[int](block=2)
    accepted: list[tuple[int, int, int]] = []
    for k, (start, length) in enumerate(spans):
        end = start + length
        found = ranges.overlapping(start, end)
        clash = [a for a in accepted if a[0] < end and start < a[1]]
        assert (found is None) == (not clash)
        assert found is None or found in clash
        if found is None:
            ranges.add(start, end, k)
            accepted.append((start, end, k))
