"""Scanner: discovery, reload and lifecycle of a directory (no pmcd needed)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from pmda_mmv import catalogue
from pmda_mmv import format as fmt
from pmda_mmv.catalogue import Catalogue
from pmda_mmv.scanner import EXITED, NOT_READY, NOT_READY_GRACE, OK, PARTIAL, REFUSED, Scanner
from tests.mmvbuild import Metric, MmvBuilder, Value, sample


def one(cluster: int = 1, value: int = 1, **kw: int) -> MmvBuilder:
    b = MmvBuilder(cluster=cluster, **kw)
    b.metrics.append(Metric("v", 1))
    b.values.append(Value("v", None, value))
    return b


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


def replace(path: Path, b: MmvBuilder) -> None:
    """Publish as libpcp_mmv does: a new inode under the same name."""
    tmp = path.with_name("." + path.name)
    b.write(tmp)
    os.replace(tmp, path)


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
    replace(d.path / "a", b)
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
    assert "header.g2 at offset 16" in d.scanner.states["a"].last_problem
    d.now += NOT_READY_GRACE
    for _ in range(3):
        d.refresh()
    assert len([line for line in d.logged if "/a:" in line]) == 1  # it stayed: explained once
    b.write(d.path / "a")
    assert d.refresh() == ([], ["a"])
    assert not d.scanner.pending


def test_status_instance_ids_are_never_reused_and_departed_names_bounded(
    d: Dir, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(catalogue, "REMEMBERED", 4)
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
    assert len(d.scanner._instances) - len(d.scanner.states) <= 4 * 9 // 8 + 1
    assert "stays" in d.scanner._instances and "gone0" not in d.scanner._instances


def test_empty_file_is_not_ready_until_written(d: Dir) -> None:
    # libpcp_mmv creates the file, then sizes it and writes the header: the soak test
    # caught hundreds of files in each of those states
    (d.path / "a").write_bytes(b"")
    d.refresh()
    assert d.state("a") == NOT_READY
    assert d.scanner.states["a"].last_problem.endswith(
        "file.size at offset 0: size 0, not written yet"
    )
    d.refresh()
    assert d.state("a") == NOT_READY and d.scanner.pending
    one().write(d.path / "a")  # the same inode, sized and written
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
    b.metrics.append(Metric("big", 2000))
    b.write(d.path / "p")
    d.refresh()
    assert d.state("p") == PARTIAL
    assert "metrics[1].item" in d.scanner.states["p"].last_problem


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
    assert "FIFO" in d.scanner.states["fifo"].last_problem
    assert d.served() == {"z"}


def test_symlink_policy(d: Dir, tmp_path_factory: pytest.TempPathFactory) -> None:
    outside = tmp_path_factory.mktemp("outside") / "secret"
    one(cluster=3).write(outside)
    one(cluster=4).write(d.path / "real")
    (d.path / "inside").symlink_to(d.path / "real")
    (d.path / "escape").symlink_to(outside)
    d.refresh()
    assert d.served() == {"real", "inside"}
    assert "out of the directory" in d.scanner.states["escape"].last_problem


def test_owner_policy(tmp_path: Path) -> None:
    one().write(tmp_path / "mine")
    os.chown(tmp_path / "mine", 0, 0)
    one(cluster=2).write(tmp_path / "theirs")
    os.chown(tmp_path / "theirs", 12345, 12345)
    scanner = Scanner(str(tmp_path), Catalogue(), owners=[0])
    scanner.refresh()
    assert set(scanner.catalogue.files) == {"mine"}
    assert "uid 12345 is not trusted" in scanner.states["theirs"].last_problem


def test_oversized_sparse_file_refused(tmp_path: Path) -> None:
    with open(tmp_path / "huge", "wb") as f:
        f.write(bytes(one().build().data))
        f.truncate(1 << 40)  # 1 TB, sparse
    scanner = Scanner(str(tmp_path), Catalogue())
    scanner.refresh()
    assert scanner.states["huge"].state == REFUSED
    assert "file.size" in scanner.states["huge"].last_problem


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


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


@pytest.mark.parametrize(
    ("pid", "served"),
    [(os.getpid(), True), (0, True), (1, True), (_dead_pid(), False), (-1, False)],
    ids=["live", "pid0-unchecked", "init", "dead", "negative"],
)
def test_process_flag(d: Dir, pid: int, served: bool) -> None:
    b = one(flags=fmt.FLAG_PROCESS, process=pid)
    b.generation = int(time.time()) << 32
    b.write(d.path / "p")
    d.refresh()
    assert (d.state("p") == OK) is served
    if not served:
        assert d.state("p") == EXITED
        assert "header.process at offset 32" in d.scanner.states["p"].last_problem


def test_process_flag_pid_reuse_detected(d: Dir) -> None:
    # A live process that started after the file's generation is not its writer.
    started = psutil.Process().create_time()
    b = one(flags=fmt.FLAG_PROCESS, process=os.getpid())
    b.generation = int(started - 3600) << 32
    b.write(d.path / "p")
    d.refresh()
    assert d.state("p") == EXITED


def test_writer_exit_noticed_at_next_refresh(d: Dir) -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        b = one(flags=fmt.FLAG_PROCESS, process=child.pid)
        b.generation = int(time.time()) << 32
        b.write(d.path / "p")
        d.refresh()
        assert d.state("p") == OK
    finally:
        child.kill()
        child.wait()
    assert d.refresh() == (["p"], [])
    assert d.state("p") == EXITED


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
    # the agent as both added and removed (tests/test_hardening.py busy writer).
    from pmda_mmv.scanner import Changes

    one().write(d.path / "a")
    first = d.scanner.refresh()
    (entry,) = first.added
    later = Changes(removed=[entry])
    first.extend(later)
    assert first.added == [] and first.removed == []


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
    scanner = Scanner(str(tmp_path), Catalogue(), max_size=size - 1)
    scanner.refresh()
    assert scanner.states["big"].state == REFUSED
    assert f"exceeds {size - 1}" in scanner.states["big"].last_problem
