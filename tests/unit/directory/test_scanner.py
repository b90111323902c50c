"""Scanner: discovery, reload and lifecycle of a directory (no pmcd needed)."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from pmda_mmv.directory import loader
from pmda_mmv.directory.backoff import RETRY_BUDGET, RETRY_FIRST, RETRY_MAX
from pmda_mmv.directory.filestate import (
    EXITED,
    NO_WRITER,
    NOT_READY,
    NOT_READY_GRACE,
    OK,
    PARTIAL,
    PENDING,
    REFUSED,
)
from pmda_mmv.directory.resources import Limits
from pmda_mmv.directory.scanner import Scanner
from pmda_mmv.mmvfile import generation, layout, limits
from pmda_mmv.namespace import indomnumbers, served
from pmda_mmv.namespace.catalogue import Catalogue
from pmda_mmv.namespace.nametree import MAX_CHILDREN
from tests.support.mmvbuild import (
    Indom,
    Instance,
    Metric,
    MmvBuilder,
    Value,
    dead_pid,
    publish,
    sample,
)
from tests.support.mmvbuild import single as one


class Dir:
    """A scanned directory whose scanner checks every served file on every refresh."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.logged: list[str] = []
        self.now = 1000.0  # the scanner's clock, moved by the tests
        self.scanner = Scanner(
            str(path),
            Catalogue(log=self.logged.append),
            log=self.logged.append,
            check_interval=0,
            clock=lambda: self.now,
        )

    def refresh(self) -> tuple[list[str], list[str]]:
        ch = self.scanner.refresh()
        return [e.name for e in ch.removed], [e.name for e in ch.added]

    def state(self, name: str) -> str:
        return self.scanner.states[name].state

    def served(self) -> set[str]:
        return set(self.scanner.catalogue.files)


@pytest.fixture
def d(tmp_path: Path) -> Dir:
    return Dir(tmp_path)


def test_new_file_is_served_at_the_next_refresh(d: Dir) -> None:
    assert d.refresh() == ([], [])
    one().write(d.path / "a")
    assert d.refresh() == ([], ["a"])
    assert d.state("a") == OK


def test_unchanged_file_keeps_its_entry(d: Dir) -> None:
    one().write(d.path / "a")
    d.refresh()
    entry = d.scanner.catalogue.files["a"]
    (d.path / "unrelated").mkdir()
    d.refresh()
    assert d.scanner.catalogue.files["a"] is entry


def test_removed_file_is_unserved_and_closed(d: Dir) -> None:
    one().write(d.path / "a")
    d.refresh()
    entry = d.scanner.catalogue.files["a"]
    (d.path / "a").unlink()
    assert d.refresh() == (["a"], [])
    assert entry.mf.fd == -1 and "a" not in d.scanner.states


def test_replaced_file_is_reloaded_with_the_same_cluster(d: Dir) -> None:
    one(cluster=0).write(d.path / "a")
    one(cluster=0).write(d.path / "b")
    d.refresh()
    cluster = d.scanner.catalogue.files["a"].cluster
    b = one(cluster=0, value=7)
    b.generation += 1
    publish(d.path / "a", b)
    assert d.refresh() == (["a"], ["a"])
    assert d.scanner.catalogue.files["a"].cluster == cluster


def test_generation_bump_in_place_reloads(d: Dir) -> None:
    one().write(d.path / "a")
    d.refresh()
    b = one(value=9)
    b.generation += 5
    with open(d.path / "a", "r+b") as f:  # same inode, same size: mmv_poke's way
        f.write(bytes(b.build().data))
    assert d.refresh() == (["a"], ["a"])
    assert d.scanner.catalogue.files["a"].mf.header.g1 == b.generation


def test_not_ready_is_retried_quietly_then_served(d: Dir) -> None:
    b = one()
    image = b.build()
    image.data[16:24] = b"\0" * 8  # g2 = 0: the writer has not finished
    image.write(d.path / "a")
    d.refresh()
    assert d.state("a") == NOT_READY and d.scanner.pending
    for _ in range(3):
        d.refresh()
    assert d.logged == []  # writers pass through this state
    assert "header.g2 at offset 16" in str(d.scanner.states["a"].last_problem)
    d.now += NOT_READY_GRACE
    for _ in range(3):
        d.refresh()
    assert len([line for line in d.logged if "/a:" in line]) == 1  # it stayed: explained once
    b.write(d.path / "a")
    d.now += RETRY_MAX  # no event for an in-place write: its backoff retries it
    assert d.refresh() == ([], ["a"])
    assert not d.scanner.pending


def never_ready(path: Path) -> None:
    image = one().build()
    image.data[16:24] = b"\0" * 8  # g2 = 0
    image.write(path)


def make_ready_unseen(path: Path) -> None:
    """Finish the file in place and put its mtime back: only a retry can see it."""
    st = path.stat()
    one().write(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def retry_times(d: Dir, n: int, step: float = 0.01) -> list[float]:
    """Refresh every ``step`` seconds of the scanner's clock until ``n`` retries happened;
    the clock at each."""
    times = []
    while len(times) < n:
        before = d.scanner.retries
        d.refresh()
        if d.scanner.retries != before:
            times.append(d.now)
        d.now += step
    d.now -= step
    return times


def test_not_ready_backoff_doubles_to_a_few_seconds(d: Dir) -> None:
    never_ready(d.path / "a")
    d.refresh()  # seen
    assert d.scanner.retries == 0
    d.refresh()  # retried at the next request
    assert d.scanner.retries == 1
    times = [d.now, *retry_times(d, 12)]
    waits = [b - a for a, b in itertools.pairwise(times)]
    want = [0.05, 0.1, 0.2, 0.4, 0.8, 1.6, 3.2] + [RETRY_MAX] * 5
    assert waits == pytest.approx(want, abs=0.011)  # the clock moves in steps of 0.01
    make_ready_unseen(d.path / "a")
    d.refresh()
    assert d.state("a") == NOT_READY  # its next retry is not due
    d.now += RETRY_MAX
    d.refresh()
    assert d.state("a") == OK


def test_not_ready_retried_at_once_on_an_event_for_it(d: Dir) -> None:
    never_ready(d.path / "a")
    retry_times(d, 8)
    make_ready_unseen(d.path / "a")
    d.refresh()
    assert d.state("a") == NOT_READY
    d.scanner.mark_dirty("a")  # what the watcher does for the writer's close-after-write
    d.refresh()
    assert d.state("a") == OK


def test_not_ready_retried_at_once_when_its_stat_changes_in_a_rescan(d: Dir) -> None:
    never_ready(d.path / "a")
    retry_times(d, 8)
    one().write(d.path / "a")  # mtime changes
    (d.path / "other").write_bytes(b"")  # the directory changes: a rescan
    d.refresh()
    assert d.state("a") == OK


def test_not_ready_retries_per_request_are_bounded_new_files_first(d: Dir) -> None:
    for i in range(RETRY_BUDGET * 3):
        never_ready(d.path / f"w{i:03d}")
    d.refresh()
    for _ in range(6):
        d.now += RETRY_MAX
        d.refresh()
        d.refresh()  # every file has waited the longest delay by now
    before = d.scanner.retries
    d.now += RETRY_MAX
    d.refresh()
    assert d.scanner.retries - before == RETRY_BUDGET
    (d.path / "new").write_bytes(b"")  # seen at the rescan, first retry at the next request
    d.refresh()
    assert d.state("new") == NOT_READY
    one().write(d.path / "new")  # in place: only a retry finds it
    d.refresh()
    assert d.state("new") == OK  # ahead of the RETRY_BUDGET * 2 files that wait


def test_status_instance_ids_are_never_reused_and_departed_names_bounded(
    d: Dir, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(served, "REMEMBERED", 4)
    one().write(d.path / "stays")
    d.refresh()
    ids = [d.scanner.states["stays"].instance]
    for n in range(20):
        one(cluster=2).write(d.path / f"gone{n}")
        d.refresh()
        ids.append(d.scanner.states[f"gone{n}"].instance)
        os.unlink(d.path / f"gone{n}")
        d.refresh()
    assert len(set(ids)) == len(ids)
    assert len(d.scanner.entries._instances) - len(d.scanner.states) <= 4 * 9 // 8 + 1
    assert "stays" in d.scanner.entries._instances and "gone0" not in d.scanner.entries._instances


def test_empty_file_is_not_ready_until_written(d: Dir) -> None:
    # libpcp_mmv creates the file, then sizes it and writes the header: the soak test
    # caught hundreds of files in each of those states
    (d.path / "a").write_bytes(b"")
    d.refresh()
    assert d.state("a") == NOT_READY
    assert str(d.scanner.states["a"].last_problem).endswith(
        "file.size at offset 0: size 0, not written yet"
    )
    d.refresh()
    assert d.state("a") == NOT_READY and d.scanner.pending
    one().write(d.path / "a")  # the same inode, sized and written
    d.now += RETRY_FIRST
    d.refresh()
    assert d.served() == {"a"}
    assert [line for line in d.logged if "size 0" in line] == []


def test_empty_file_that_stays_empty_is_explained_once(d: Dir) -> None:
    (d.path / "a").write_bytes(b"")
    d.refresh()
    d.now += NOT_READY_GRACE
    d.refresh()
    d.refresh()
    assert [line for line in d.logged if "/a:" in line] == [
        f"{d.path / 'a'}: file.size at offset 0: size 0, not written yet"
    ]


def test_refused_file_logged_once_and_others_still_served(d: Dir) -> None:
    (d.path / "bad").write_bytes(b"MMV\0" + b"\x07" * 60)
    one().write(d.path / "good")
    d.refresh()
    for _ in range(3):
        d.refresh()
    assert d.state("bad") == REFUSED and d.served() == {"good"}
    bad_lines = [line for line in d.logged if "/bad:" in line]
    assert len(bad_lines) == 1 and "header.version at offset 4" in bad_lines[0]


def test_partial_file_reports_problems(d: Dir) -> None:
    b = one()
    b.metrics.append(Metric("odd", 2, type=99))  # an item past 1023 is served now (spill)
    b.write(d.path / "p")
    d.refresh()
    assert d.state("p") == PARTIAL
    assert "metrics[1].type" in str(d.scanner.states["p"].last_problem)


def test_fifo_socket_and_directory_are_refused_without_blocking(d: Dir) -> None:
    os.mkfifo(d.path / "fifo")
    (d.path / "sub").mkdir()
    import socket

    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(d.path / "sock"))
    one().write(d.path / "z")
    d.refresh()
    sock.close()
    assert {n: d.state(n) for n in ("fifo", "sub", "sock")} == dict.fromkeys(
        ("fifo", "sub", "sock"), REFUSED
    )
    assert "FIFO" in str(d.scanner.states["fifo"].last_problem)
    assert d.served() == {"z"}


def test_symlink_policy(d: Dir, tmp_path_factory: pytest.TempPathFactory) -> None:
    outside = tmp_path_factory.mktemp("outside") / "secret"
    one(cluster=3).write(outside)
    one(cluster=4).write(d.path / "real")
    (d.path / "inside").symlink_to(d.path / "real")
    (d.path / "escape").symlink_to(outside)
    d.refresh()
    assert d.served() == {"real", "inside"}
    assert "out of the directory" in str(d.scanner.states["escape"].last_problem)


def test_owner_policy(tmp_path: Path) -> None:
    one().write(tmp_path / "mine")
    os.chown(tmp_path / "mine", 0, 0)
    one(cluster=2).write(tmp_path / "theirs")
    os.chown(tmp_path / "theirs", 12345, 12345)
    scanner = Scanner(str(tmp_path), Catalogue(), owners=[0])
    scanner.refresh()
    assert set(scanner.catalogue.files) == {"mine"}
    assert "uid 12345 is not trusted" in str(scanner.states["theirs"].last_problem)


def test_oversized_sparse_file_refused(tmp_path: Path) -> None:
    with open(tmp_path / "huge", "wb") as f:
        f.write(bytes(one().build().data))
        f.truncate(1 << 40)  # 1 TB, sparse
    scanner = Scanner(str(tmp_path), Catalogue())
    scanner.refresh()
    assert scanner.states["huge"].state == REFUSED
    assert "file.size" in str(scanner.states["huge"].last_problem)


def test_directory_removed_and_recreated(tmp_path: Path) -> None:
    mmv = tmp_path / "mmv"
    mmv.mkdir()
    d = Dir(mmv)
    one().write(mmv / "a")
    assert d.refresh() == ([], ["a"])
    for f in mmv.iterdir():
        f.unlink()
    mmv.rmdir()
    assert d.refresh() == (["a"], [])
    mmv.mkdir()
    one(cluster=2).write(mmv / "b")
    assert d.refresh() == ([], ["b"])


NOT_FOUND = "writer PID {} not found in this PID namespace or any other"


@pytest.mark.parametrize(
    ("pid", "served", "why"),
    [
        (os.getpid(), True, ""),  # this process: the scanner in it has the file open
        (0, True, ""),
        # init: alive, but not the file's writer
        (1, False, NOT_FOUND.format(1) + ": PID 1 here "),
        (2, False, NOT_FOUND.format(2) + ": PID 2 here is a kernel thread"),  # kthreadd
        (dead_pid(), False, "not found in this PID namespace or any other"),
        (-1, False, "writer PID -1 is not a process ID"),
    ],
    ids=["live", "pid0-unchecked", "init", "kthreadd", "dead", "negative"],
)
@pytest.mark.host_pid_namespace  # host init at PID 1, kthreadd at 2
def test_process_flag(d: Dir, pid: int, served: bool, why: str) -> None:
    b = one(flags=layout.FLAG_PROCESS, process=pid)
    b.generation = int(time.time()) << 32
    b.write(d.path / "p")
    d.refresh()
    assert (d.state("p") == OK) is served
    if not served:
        assert d.state("p") == NO_WRITER  # not exited: no writer was ever seen
        problem = str(d.scanner.states["p"].last_problem)
        assert "header.process at offset 32: " in problem and why in problem, problem


def test_process_flag_pid_reuse_detected(d: Dir) -> None:
    # A live process that started after the file's generation is not its writer.
    started = psutil.Process().create_time()
    b = one(flags=layout.FLAG_PROCESS, process=os.getpid())
    b.generation = int(started - 3600) << 32
    b.write(d.path / "p")
    d.refresh()
    assert d.state("p") == NO_WRITER
    why = f"PID {os.getpid()} belongs to a process started after this file: PID reused"
    assert why in str(d.scanner.states["p"].last_problem)


MAPPER = """
import mmap, sys
maps = []
for line in sys.stdin:
    with open(line.strip(), "rb") as f:
        maps.append(mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ))
    print("ready", flush=True)
"""


def mapper() -> subprocess.Popen[str]:
    """A process that maps each file whose path it reads (a writer, to the agent)."""
    return subprocess.Popen(
        [sys.executable, "-c", MAPPER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )


def mapped(child: subprocess.Popen[str], path: Path) -> None:
    assert child.stdin is not None and child.stdout is not None
    child.stdin.write(f"{path}\n")
    child.stdin.flush()
    assert child.stdout.readline() == "ready\n"


def test_a_live_process_that_does_not_map_the_file_is_not_its_writer(d: Dir) -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        b = one(flags=layout.FLAG_PROCESS, process=child.pid)
        b.generation = int(time.time()) << 32
        b.write(d.path / "p")
        d.refresh()
        assert d.state("p") == NO_WRITER
        why = f"PID {child.pid} here does not have this file mapped or open"
        assert why in str(d.scanner.states["p"].last_problem)
    finally:
        child.kill()
        child.wait()


def test_writer_exit_noticed_at_next_refresh(d: Dir) -> None:
    child = mapper()
    try:
        b = one(flags=layout.FLAG_PROCESS, process=child.pid)
        b.generation = int(time.time()) << 32
        b.write(d.path / "p")
        mapped(child, d.path / "p")
        d.refresh()
        assert d.state("p") == OK
    finally:
        child.kill()
        child.wait()
    assert d.refresh() == (["p"], [])
    assert d.state("p") == EXITED
    why = f"header.process at offset 32: writer process {child.pid} has exited"
    assert why in str(d.scanner.states["p"].last_problem)


def test_watcher_marks_are_applied(d: Dir) -> None:
    one().write(d.path / "a")
    d.refresh()
    b = one(value=3)
    b.generation += 1
    with open(d.path / "a", "r+b") as f:
        f.write(bytes(b.build().data))
    d.scanner.check_interval = 3600  # only the queued mark can find the change
    d.scanner.mark_dirty("a")
    removed, added = d.refresh()
    assert (removed, added) == (["a"], ["a"])


def test_sample_file_values_and_many_files(d: Dir) -> None:
    for i in range(50):
        b = sample()
        b.cluster = 0
        b.write(d.path / f"f{i:03d}")
    d.refresh()
    clusters = [e.cluster for e in d.scanner.catalogue.files.values()]
    assert len(clusters) == 50 and len(set(clusters)) == 50


def test_changes_entry_added_then_removed_in_one_refresh_is_neither(d: Dir) -> None:
    # A file loaded and found stale in the same refresh (its writer moved on) must not reach
    # the agent as both added and removed (tests/system/test_lifecycle.py busy writer).
    from pmda_mmv.directory.filestate import Changes

    one().write(d.path / "a")
    first = d.scanner.refresh()
    (entry,) = first.added
    later = Changes(removed=[entry])
    first.extend(later)
    assert first.added == [] and first.removed == []


def test_changes_extend_with_many_removed_and_added_keeps_the_right_entries() -> None:
    # A breaker's held changes: 8,000 loaded files held, then 8,000 removals (half of them
    # of held files).  The pair-by-pair version took 7 s here; the result is what counts.
    from typing import cast

    from pmda_mmv.directory.filestate import Changes
    from pmda_mmv.namespace.served import FileEntry

    def entries(n: int) -> list[FileEntry]:
        return [cast(FileEntry, object()) for _ in range(n)]

    held, served = entries(8000), entries(4000)
    changes = Changes(added=list(held))
    later_added = entries(3)
    changes.extend(Changes(removed=held[::2] + served, added=later_added, states=True))
    assert changes.added == held[1::2] + later_added
    assert changes.removed == served and changes.states


def test_missing_directory_logged_once(tmp_path: Path) -> None:
    d = Dir(tmp_path / "absent")
    for _ in range(3):
        d.refresh()
    lines = [line for line in d.logged if "cannot list directory" in line]
    assert len(lines) == 1 and "absent" in lines[0]


def test_max_size_refuses_big_valid_files(tmp_path: Path) -> None:
    b = sample()
    b.write(tmp_path / "big")
    size = (tmp_path / "big").stat().st_size
    scanner = Scanner(str(tmp_path), Catalogue(), limits=Limits(max_size=size - 1))
    scanner.refresh()
    assert scanner.states["big"].state == REFUSED
    assert f"exceeds {size - 1}" in str(scanner.states["big"].last_problem)


def test_file_refused_for_want_of_a_cluster_is_served_when_one_frees_up(d: Dir) -> None:
    # 4,095 tiny files take every cluster; the refusal must not stay cached on
    # the refused file's unchanged stat
    for i in range(limits.MAX_CLUSTER + 1):
        one(cluster=0).write(d.path / f"t{i:04d}")
    d.refresh()
    last = f"t{limits.MAX_CLUSTER:04d}"
    assert len(d.served()) == limits.MAX_CLUSTER and d.state(last) == REFUSED
    assert "no free cluster" in str(d.scanner.states[last].last_problem)
    d.refresh()
    assert d.state(last) == REFUSED
    os.unlink(d.path / "t0007")
    removed, added = d.refresh()
    assert (removed, added) == (["t0007"], [last])
    assert d.scanner.catalogue.files[last].cluster == 8  # t0007's (cluster 0 is the agent's)


def test_a_filled_probe_window_does_not_refuse_an_indom(d: Dir) -> None:
    # a file (cluster 2048, where C's number is the serial itself) holding the
    # victim's C number and every number its search from its derived one tries: it was
    # refused ("no free PCP indom serial") while millions of numbers were free.
    victim = MmvBuilder(cluster=3, version=2)
    victim.indoms.append(Indom(1, [Instance(0, "only")]))
    victim.metrics.append(Metric("m", 1, indom=1))
    victim.values.append(Value("m", 0, 5))
    start = indomnumbers.derived_indom("victim", 1, d.scanner.catalogue.registry.secret)
    squat = MmvBuilder(cluster=2048, version=2)
    numbers = {(3 << 11) | 1} | {(start - 1 + k) % indomnumbers.INDOM_MASK + 1 for k in range(4096)}
    squat.indoms += [Indom(n) for n in sorted(numbers)]
    squat.write(d.path / "squat")
    d.refresh()
    victim.write(d.path / "victim")
    d.refresh()
    assert d.state("victim") == OK
    serial = d.scanner.catalogue.files["victim"].indoms[1].serial
    # an indom no metric uses is not served and holds no number, so the
    # squat's (it has no metric) take none and the victim has its C number
    assert not d.scanner.catalogue.files["squat"].indoms
    assert serial == (3 << 11) | 1
    assert serial not in d.scanner.catalogue.indom_sources.keys() - {serial}
    os.unlink(d.path / "squat")
    d.refresh()
    victim.write(d.path / "victim")  # rewritten: it keeps its number (the registry's)
    d.refresh()
    assert d.scanner.catalogue.files["victim"].indoms[1].serial == serial


@pytest.fixture(params=[True, False], ids=["pidfd", "psutil"])
def pidfd(request: pytest.FixtureRequest) -> bool:
    return bool(request.param)


def sleeper() -> subprocess.Popen[str]:
    return mapper()


def test_writer_exit_seen_at_the_next_refresh_even_as_a_zombie(tmp_path: Path, pidfd: bool) -> None:
    d = Dir(tmp_path)
    d.scanner = Scanner(str(tmp_path), Catalogue(), pidfd=pidfd, check_interval=3600)
    children = [sleeper() for _ in range(3)]
    try:
        for k, child in enumerate(children):
            b = one(cluster=k + 1, flags=layout.FLAG_PROCESS, process=child.pid)
            b.generation = int(time.time()) << 32
            b.write(tmp_path / f"p{k}")
            mapped(child, tmp_path / f"p{k}")
        d.refresh()  # the first refresh always checks every served file
        assert d.served() == {"p0", "p1", "p2"}
        children[0].kill()
        children[0].wait()  # reaped
        children[1].kill()  # a zombie: it has exited, its parent has not reaped it yet
        while psutil.Process(children[1].pid).status() != psutil.STATUS_ZOMBIE:
            time.sleep(0.01)
        d.refresh()
        if pidfd:  # the next request, whatever the check interval
            assert d.served() == {"p2"}
            assert d.state("p0") == d.state("p1") == EXITED
        else:  # psutil: at the periodic check; a zombie still runs for psutil, as for C
            assert d.served() == {"p0", "p1", "p2"}
            d.scanner.check_interval = 0
            d.refresh()
            assert d.served() == {"p1", "p2"}
    finally:
        for child in children:
            child.kill()
            child.wait()


def test_pid_reuse_detected_for_plain_seconds_generations(d: Dir) -> None:
    # Speed, Parfait and Hornet write the creation time in plain Unix seconds
    child = sleeper()
    try:
        started = psutil.Process(child.pid).create_time()
        for name, generation in (("stale", int(started) - 3600), ("fresh", int(started) + 1)):
            b = one(cluster=len(name), flags=layout.FLAG_PROCESS, process=child.pid)
            b.generation = generation
            b.write(d.path / name)
            mapped(child, d.path / name)
        d.refresh()
        assert d.state("stale") == NO_WRITER and d.state("fresh") == OK
    finally:
        child.kill()
        child.wait()


def test_with_a_real_watcher_only_a_write_wakes_a_file_that_waits(d: Dir) -> None:
    # The agent's own reads of a waiting file come back as inotify open/close events; they
    # must not count as the event that retries it at once.  The scanner's clock stands
    # still, so no backoff retry can be due.
    from pmda_mmv.directory.watcher import Watcher

    never_ready(d.path / "a")
    watcher = Watcher(str(d.path), d.scanner.mark_dirty)
    watcher.ensure()
    try:
        for _ in range(6):
            d.refresh()
            time.sleep(0.1)  # events of the refresh's reads arrive meanwhile
        assert d.scanner.retries == 1  # the retry at the next request, no more
        with open(d.path / "a", "r+b") as f:  # the writer finishes with write(2)
            f.write(bytes(one().build().data))
        deadline = time.monotonic() + 10
        while d.state("a") != OK and time.monotonic() < deadline:
            d.refresh()
            time.sleep(0.01)
        assert d.state("a") == OK
    finally:
        watcher.stop()


@pytest.mark.parametrize(
    ("g1", "created"),
    [
        ((1_700_000_000 << 32) | 250_000, 1_700_000_000.25),  # libpcp_mmv
        (1_700_000_000, 1_700_000_000.0),  # Speed, Parfait, Hornet: plain seconds
        (1, None),  # a counter
        (0x5F5E1000000001, None),  # a counter in the high word
        ((1_700_000_000 << 32) | 1_000_000, None),  # not microseconds
        (int(time.time()) + 3 * 86400, None),  # seconds in the future
        (946684799, None),  # before 2000
    ],
    ids=["libpcp_mmv", "seconds", "counter", "high-counter", "bad-usec", "future", "old"],
)
def test_generation_time_decided_by_plausibility(g1: int, created: float | None) -> None:
    assert generation.generation_time(g1, time.time()) == created


def test_files_past_the_budget_wait_in_order_and_none_is_lost(tmp_path: Path) -> None:
    """A clock that moves 10 ms at each reading: each refresh loads what fits in its
    budget, the rest are PENDING, the following refreshes go on in name order."""
    names = [f"f{k:02d}" for k in range(20)]
    for k, name in enumerate(names):
        one(cluster=k + 1).write(tmp_path / name)
    ticks = itertools.count()
    scanner = Scanner(str(tmp_path), Catalogue(), clock=lambda: next(ticks) * 0.01)
    order: list[str] = []
    first = scanner.refresh()
    order += [e.name for e in first.added]
    assert 0 < len(order) < len(names)
    assert {scanner.states[n].state for n in names[len(order) :]} == {PENDING}
    assert scanner.pending and scanner.queued == len(names) - len(order)
    for _ in range(len(names)):
        order += [e.name for e in scanner.refresh().added]
    assert order == names
    assert {s.state for s in scanner.states.values()} == {OK} and not scanner.queued


def test_a_new_file_is_served_at_the_next_request_however_many_names_are_known(
    tmp_path: Path,
) -> None:
    """Found by a breaker run: with 100,000 entries known, each change of the directory
    queued the new name after every known one (stat again within the budget, one request
    after another).  New names come first now; the known ones are still looked at, within
    the budget: one renamed over is served in the end.  The clock is past the deadline at
    each look: one name a request."""
    junk = b"NOTMMV\0\0" + bytes(layout.HEADER_SIZE)
    for k in range(10):
        (tmp_path / f"junk{k}").write_bytes(junk)
    ticks = itertools.count()
    scanner = Scanner(str(tmp_path), Catalogue(), clock=lambda: next(ticks) * 1.0)
    scanner.refresh(force=True)
    for k in range(3):
        one(cluster=k + 1).write(tmp_path / f"new{k}")
        scanner.refresh()
        assert f"new{k}" in scanner.catalogue.files
    one(cluster=9).write(tmp_path / "tmp")
    os.rename(tmp_path / "tmp", tmp_path / "junk5")
    for _ in range(20):
        scanner.refresh()
    assert set(scanner.catalogue.files) == {"new0", "new1", "new2", "junk5"}
    assert not scanner.queued


def test_files_removed_at_once_are_unserved_at_once_and_closed_over_the_next_requests(
    tmp_path: Path,
) -> None:
    """Found by a breaker run: 12,000 served files removed at once were closed in the same
    request as they were unserved.  Unserving stays immediate (a removed file is never
    served); the descriptors close CLOSE_BUDGET a request once past the deadline, in the
    end all of them."""
    from pmda_mmv.directory.scanner import CLOSE_BUDGET
    from tests.support.hostile import shared_cluster

    paths = shared_cluster(tmp_path, 2 * CLOSE_BUDGET + 1)
    ticks = itertools.count()
    scanner = Scanner(str(tmp_path), Catalogue(), clock=lambda: next(ticks) * 1.0)
    scanner.refresh(force=True)
    entries = list(scanner.catalogue.files.values())
    assert len(entries) == len(paths)
    for path in paths:
        path.unlink()
    changes = scanner.refresh()
    assert len(changes.removed) == len(paths) and not scanner.catalogue.files
    assert not scanner.catalogue.sources and not scanner.states
    open_fds = [e for e in entries if e.mf.fd >= 0]
    assert len(open_fds) == len(paths) - CLOSE_BUDGET
    scanner.refresh()
    scanner.refresh()
    assert all(e.mf.fd == -1 for e in entries)


def test_forced_refresh_is_not_bounded(tmp_path: Path) -> None:
    for k in range(5):
        one(cluster=k + 1).write(tmp_path / f"f{k}")
    ticks = itertools.count()
    scanner = Scanner(str(tmp_path), Catalogue(), clock=lambda: next(ticks) * 1.0)
    assert len(scanner.refresh(force=True).added) == 5


def test_names_below_one_node_are_capped() -> None:
    cat = Catalogue()
    for k in range(MAX_CHILDREN):
        cat.tree.claim(f"mmv.f{k}.v")
    why = cat.name_conflict("mmv.new.v")
    assert why is not None and "mmv has" in why
    assert cat.name_conflict("mmv.f0.w") is None  # below an existing node: not new at mmv
    cat.tree.release("mmv.f0.v")
    assert cat.name_conflict("mmv.new.v") is None


def test_files_past_the_total_size_wait_until_another_leaves(tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    one(cluster=1).write(first)
    one(cluster=2).write(second)
    size = first.stat().st_size
    scanner = Scanner(str(tmp_path), Catalogue(), limits=Limits(max_total=size + size // 2))
    scanner.refresh()
    assert set(scanner.catalogue.files) == {"a"}
    assert scanner.states["b"].state == REFUSED
    assert "--max-total" in str(scanner.states["b"].last_problem)
    first.unlink()
    scanner.refresh()
    assert set(scanner.catalogue.files) == {"b"}


def test_files_refused_for_the_total_size_come_back_within_the_budget_in_order(
    tmp_path: Path,
) -> None:
    """Found by a breaker run: a big file filled --max-total, 3,446 small ones were refused
    for it, the big one went: the next request retried every small one, with no deadline
    (2.24 s).  With the clock past the deadline at each look, a few a request, in name
    order, none lost."""
    big = tmp_path / "big"
    b = sample()
    b.cluster = 99
    b.write(big)
    names = [f"s{k:02d}" for k in range(20)]
    for k, name in enumerate(names):
        one(cluster=k + 1).write(tmp_path / name)
    ticks = itertools.count()
    scanner = Scanner(
        str(tmp_path),
        Catalogue(),
        limits=Limits(max_total=big.stat().st_size),
        clock=lambda: next(ticks) * 1.0,
    )
    scanner.refresh(force=True)
    assert set(scanner.catalogue.files) == {"big"}
    assert {scanner.states[n].state for n in names} == {REFUSED}
    big.unlink()
    order: list[str] = []
    first = scanner.refresh()
    order += [e.name for e in first.added]
    assert [e.name for e in first.removed] == ["big"]
    assert 0 < len(order) < len(names)
    for _ in range(2 * len(names)):
        order += [e.name for e in scanner.refresh().added]
    assert order == names
    assert {scanner.states[n].state for n in names} == {OK}


def test_a_listing_that_fails_for_want_of_descriptors_keeps_what_is_served(d: Dir) -> None:
    """Found by a breaker run: with the agent at its descriptor limit, ``os.listdir`` failed
    with EMFILE and the listing was taken as an empty directory: every served file, good
    ones included, was dropped.  The real condition: the soft RLIMIT_NOFILE lowered to the
    lowest free descriptor, so no descriptor can be opened."""
    import resource

    one(cluster=5).write(d.path / "good")
    d.refresh()
    assert d.served() == {"good"}
    d.scanner.mark_dirty()  # the next refresh lists the directory
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    lowest = os.dup(0)
    os.close(lowest)
    resource.setrlimit(resource.RLIMIT_NOFILE, (lowest, hard))
    try:
        d.refresh()
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert d.served() == {"good"}
    assert any("Too many open files" in line for line in d.logged)
    one(cluster=6).write(d.path / "new")
    d.refresh()  # tried again once descriptors are free
    assert d.served() == {"good", "new"}


def test_a_hard_link_to_a_served_file_is_refused_naming_it_until_that_name_goes(d: Dir) -> None:
    """Deliberate difference from the C agent, which maps and serves every name: a hard
    link to a file served under another name is refused, naming it, and served once that
    name goes.  Found by a breaker run: one 31 MB file under 7 hard links got the agent
    dropped (every name loaded, validated and copied at each fetch), and 1,000 links cost
    nothing to make.  A symlink beside a file is still served (test_symlink_policy)."""
    one(cluster=3).write(d.path / "a")
    os.link(d.path / "a", d.path / "b")
    os.link(d.path / "a", d.path / "c")
    d.refresh()
    assert d.served() == {"a"}
    for name in "bc":
        assert d.state(name) == REFUSED
        assert "same file as a (hard link), file not served" in str(
            d.scanner.states[name].last_problem
        )
    os.utime(d.path / "a", (5, 5))  # touched: a is reloaded, b and c stay refused
    d.refresh()
    assert d.served() == {"a"} and d.state("b") == REFUSED
    (d.path / "a").unlink()
    d.refresh()
    assert d.served() == {"b"}
    assert "same file as b (hard link)" in str(d.scanner.states["c"].last_problem)


def test_a_hard_link_loaded_in_the_same_scan_is_refused_and_served_if_the_first_is_not(
    d: Dir,
) -> None:
    """Two links found by one listing: the first name is served; when the first cannot be
    served (its name is not a name component) the other is."""
    one(cluster=3).write(d.path / "a")
    os.link(d.path / "a", d.path / "b")
    d.refresh()
    assert d.served() == {"a"} and "same file as a" in str(d.scanner.states["b"].last_problem)
    one(cluster=4).write(d.path / "bad-name")
    os.link(d.path / "bad-name", d.path / "good")
    d.refresh()
    d.refresh()
    assert d.served() == {"a", "good"} and d.state("bad-name") == REFUSED


def test_refused_entries_count_toward_the_request_budget(tmp_path: Path) -> None:
    """Found by a breaker run: 20,000 files of a bad magic were all opened by the first
    request (1.66 s; C 0.37 s), as the budget counted only files that opened.  Every entry
    looked at counts now: with the clock past the deadline at each look, one a request."""
    for k in range(5):
        (tmp_path / f"junk{k}").write_bytes(b"NOTMMV\0\0" + bytes(layout.HEADER_SIZE))
    ticks = itertools.count()
    scanner = Scanner(str(tmp_path), Catalogue(), clock=lambda: next(ticks) * 1.0)
    for looked in range(1, 6):
        scanner.refresh()
        states = [s.state for s in scanner.states.values()]
        assert states.count(REFUSED) == looked and states.count(PENDING) == 5 - looked
    assert all("magic" in str(s.last_problem) for s in scanner.states.values())


def test_unexpected_error_loading_one_file_refuses_it_and_serves_the_others(
    d: Dir, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A defect met while loading one file (here the reader raising an exception nothing
    expects) is that file's problem: the files beside it are served by the same refresh,
    the file is refused with the exception named, and loaded again once its stat changes
    (a ModuleNotFoundError at the first PROCESS file must not end every refresh)."""
    real_open = loader.MmvFile.open

    def faulty_open(path: str, **kwargs: object) -> loader.MmvFile:
        if os.path.basename(path) == "b":
            raise KeyError("a defect")
        return real_open(path, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(loader.MmvFile, "open", staticmethod(faulty_open))
    for name, cluster in (("a", 1), ("b", 2), ("c", 3)):
        one(cluster=cluster).write(d.path / name)
    assert d.refresh() == ([], ["a", "c"])
    assert d.state("b") == REFUSED
    why = str(d.scanner.states["b"].last_problem)
    assert (
        why == f"{d.path / 'b'}: unexpected error while loading (KeyError: 'a defect'), not served"
    )
    assert d.logged.count(why) == 1
    assert d.refresh() == ([], [])  # not retried while the file stays as it is
    monkeypatch.setattr(loader.MmvFile, "open", staticmethod(real_open))
    publish(d.path / "b", one(cluster=2, value=5))  # a new inode: its stat changed
    assert d.refresh() == ([], ["b"])
    assert d.state("b") == OK
