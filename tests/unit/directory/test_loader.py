"""pmda_mmv.directory.loader, directly (no scanner, no pmcd): :meth:`Loader.consider` on
real files of a directory.  Files are served in name order (first come, first served), an
unchanged entry is not loaded again, a gone one is forgotten, a hard link is refused
naming the file it is a link of and served once that one goes, ``max_total`` refuses a
file that would take the served bytes past it and serves it once another leaves, a file
not written yet is not ready, and past the deadline the first name not reached is
returned.  The scanner's scheduling around it: tests/unit/directory/test_scanner*.py."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pmda_mmv.directory.entrytable import EntryTable
from pmda_mmv.directory.filestate import NO_WRITER, NOT_READY, OK, PENDING, REFUSED
from pmda_mmv.directory.loader import Loader
from pmda_mmv.directory.resources import Limits, Resources
from pmda_mmv.mmvfile import layout
from pmda_mmv.namespace.catalogue import Catalogue
from tests.support.mmvbuild import single

MAX_SIZE = 1 << 30


class Loaded:
    """A Loader of ``directory`` and its log lines."""

    def __init__(self, directory: Path, max_total: int = 1 << 40) -> None:
        self.directory = directory
        self.lines: list[str] = []
        entries = EntryTable(
            Catalogue(),
            Resources(Limits(max_size=MAX_SIZE, max_total=max_total)),
            not_ready_grace=10.0,
            log=self.lines.append,
            clock=time.monotonic,
            pidfd=True,
        )
        self.loader = Loader(str(directory), entries, owners=None, clock=time.monotonic)

    def consider(self, *names: str) -> tuple[list[str], list[str]]:
        """(names added, names removed) by one _consider of ``names`` (all of the
        directory's entries when none are given)."""
        names = names or tuple(sorted(os.listdir(self.directory)))
        changes, stop = self.loader.consider(names)
        assert stop is None
        return [e.name for e in changes.added], [e.name for e in changes.removed]

    def state(self, name: str) -> tuple[str, str]:
        s = self.loader.entries.states[name]
        return s.state, str(s.last_problem or "")

    def close(self) -> None:
        for state in self.loader.entries.states.values():
            if state.entry is not None:
                state.entry.mf.close()
        for mf in self.loader.entries.closing:
            mf.close()


@pytest.fixture
def loaded(tmp_path: Path) -> Iterator[Loaded]:
    lo = Loaded(tmp_path)
    yield lo
    lo.close()


def test_files_are_served_in_name_order_first_come_first_served(
    tmp_path: Path, loaded: Loaded
) -> None:
    """Two files serve the same name and ask for no cluster of their own: both are served
    (files of one metric share it); what matters is the order the catalogue saw them."""
    single(5, name="a").write(tmp_path / "b")
    single(6, name="b").write(tmp_path / "a")
    added, removed = loaded.consider("b", "a")
    assert added == ["a", "b"] and removed == []
    assert loaded.state("a") == (OK, "") and loaded.state("b") == (OK, "")
    assert sorted(loaded.loader.entries.catalogue.files) == ["a", "b"]


def test_an_unchanged_entry_is_not_loaded_again(tmp_path: Path, loaded: Loaded) -> None:
    single(5).write(tmp_path / "app")
    assert loaded.consider() == (["app"], [])
    entry = loaded.loader.entries.states["app"].entry
    assert loaded.consider() == ([], [])
    assert loaded.loader.entries.states["app"].entry is entry


def test_a_rewritten_file_is_unserved_and_served_anew(tmp_path: Path, loaded: Loaded) -> None:
    single(5).write(tmp_path / "app")
    loaded.consider()
    tmp = tmp_path / ".app.tmp"
    single(5, value=9).write(tmp)
    os.replace(tmp, tmp_path / "app")  # a new inode under the name
    assert loaded.consider("app") == (["app"], ["app"])


def test_a_gone_entry_is_forgotten(tmp_path: Path, loaded: Loaded) -> None:
    single(5).write(tmp_path / "app")
    loaded.consider()
    (tmp_path / "app").unlink()
    assert loaded.consider("app") == ([], ["app"])
    assert "app" not in loaded.loader.entries.states


def test_a_hard_link_is_refused_until_its_file_goes(tmp_path: Path, loaded: Loaded) -> None:
    single(5).write(tmp_path / "a")
    os.link(tmp_path / "a", tmp_path / "b")
    assert loaded.consider() == (["a"], [])
    state, problem = loaded.state("b")
    assert state == REFUSED
    assert problem == f"{tmp_path}/b: file: same file as a (hard link), file not served"
    (tmp_path / "a").unlink()
    assert loaded.consider("a") == ([], ["a"])  # b is looked at again ...
    assert loaded.consider("b") == (["b"], [])  # ... and served
    assert loaded.state("b") == (OK, "")


def test_a_gone_hard_link_is_forgotten_while_its_file_stays_served(
    tmp_path: Path, loaded: Loaded
) -> None:
    """Hard links made and removed one after the other while the file they link stays
    served: each was refused and remembered (to be looked at again when the file goes);
    once a link is gone, nothing of it stays remembered (the names of every link ever
    made would otherwise be kept for as long as the file is served: a writer that makes
    and removes links in a loop grows the agent without bound)."""
    single(5).write(tmp_path / "a")
    assert loaded.consider() == (["a"], [])
    for k in range(50):
        link = tmp_path / f"l{k}"
        os.link(tmp_path / "a", link)
        loaded.consider(link.name)
        assert loaded.state(link.name)[0] == REFUSED
        link.unlink()
        loaded.consider(link.name)
        assert link.name not in loaded.loader.entries.states
    st = (tmp_path / "a").stat()
    assert loaded.loader.resources.links((st.st_dev, st.st_ino)) == []


def test_max_total_refuses_a_file_then_serves_it_when_another_leaves(tmp_path: Path) -> None:
    size = len(single(5).build().data)
    lo = Loaded(tmp_path, max_total=size * 2)
    try:
        for name, cluster in (("a", 5), ("b", 6), ("c", 7)):
            single(cluster).write(tmp_path / name)
        assert lo.consider() == (["a", "b"], [])
        state, problem = lo.state("c")
        assert state == REFUSED
        assert problem == (
            f"{tmp_path}/c: file size {size}: the served files would hold more than "
            f"{size * 2} bytes (--max-total), file not served"
        )
        assert lo.loader.entries.starved == {"c"}  # the scanner retries it when a file leaves
        unchanged = lo.loader.entries.states["c"].key
        assert lo.consider("c") == ([], [])  # as it was: not looked at again
        (tmp_path / "a").unlink()
        lo.consider("a")
        lo.loader.entries.states["c"].key = unchanged  # the same stat: a retry must not look at it
        assert lo.consider("c") == ([], [])
        lo.loader.entries.invalidate(["c"])  # what the scanner's retry of starved files does
        assert lo.consider("c") == (["c"], [])
        assert lo.loader.entries.starved == set()
    finally:
        lo.close()


def test_a_file_not_written_yet_is_not_ready(tmp_path: Path, loaded: Loaded) -> None:
    (tmp_path / "empty").write_bytes(b"")
    assert loaded.consider() == ([], [])
    state, problem = loaded.state("empty")
    assert state == NOT_READY
    assert problem.endswith("file.size at offset 0: size 0, not written yet")
    single(5).write(tmp_path / "empty")
    loaded.loader.entries.invalidate(["empty"])  # its retry is due (the backoff's part)
    assert loaded.consider("empty") == (["empty"], [])


def test_past_the_deadline_the_first_name_not_reached_is_returned(
    tmp_path: Path, loaded: Loaded
) -> None:
    for k in range(3):
        single(5 + k).write(tmp_path / f"f{k}")
    changes, stop = loaded.loader.consider(["f0", "f1", "f2"], deadline=0.0)
    assert stop == "f1"  # one entry is looked at whatever the deadline
    assert [e.name for e in changes.added] == ["f0"]
    changes, stop = loaded.loader.consider(["f1", "f2"])
    assert stop is None and [e.name for e in changes.added] == ["f1", "f2"]


def test_a_skipped_entry_and_one_without_a_writer_are_problems_of_the_entry(
    tmp_path: Path, loaded: Loaded
) -> None:
    """A FIFO is refused as the directory's policy says; a PROCESS file whose writer PID is
    no process ID, reached through a symlink, has no writer, its problem naming the entry."""
    os.mkfifo(tmp_path / "fifo")
    single(5, name="a", flags=layout.FLAG_PROCESS, process=-5).write(tmp_path / "real")
    os.chmod(tmp_path / "real", 0o600)
    os.symlink("real", tmp_path / "link")
    loaded.consider("fifo", "link")
    assert loaded.state("fifo") == (REFUSED, f"{tmp_path}/fifo: not a regular file (FIFO)")
    at = layout.HEADER.at["process"]
    assert loaded.state("link") == (
        NO_WRITER,
        f"{tmp_path}/link: header.process at offset {at}: writer PID -5 is not a process ID"
        " (MMV_FLAG_PROCESS), file not served",
    )
    assert loaded.lines[-2:] == [loaded.state("fifo")[1], loaded.state("link")[1]]


def test_a_file_not_ready_whose_writer_search_goes_on_is_pending_and_not_ready_no_more(
    tmp_path: Path,
) -> None:
    """A PROCESS file first found empty, then written: its walk of /proc (here a /proc of
    many processes, none its writer) does not end by the deadline, so the search goes on
    at the next request: the file is PENDING and queued, no longer among the files not
    ready (whose retries the backoff schedules), and the descriptor kept to read its
    header while it was not ready is closed."""
    directory, proc = tmp_path / "mmv", tmp_path / "proc"
    directory.mkdir()
    for pid in range(1, 3 * 64):  # more than one step of the walk (procfs.WALK_STEP)
        (proc / str(pid)).mkdir(parents=True)
    (directory / "app").write_bytes(b"")
    lo = Loaded(directory)
    try:
        entries = lo.loader.entries
        entries.writers.proc = str(proc)
        assert lo.consider() == ([], [])
        assert lo.state("app")[0] == NOT_READY and set(entries.not_ready) == {"app"}
        single(5, flags=layout.FLAG_PROCESS, process=7).write(directory / "app")
        changes, stop = lo.loader.consider(["app"], deadline=time.monotonic() - 1)
        assert stop is None and changes.added == []
        assert lo.state("app") == (PENDING, "")
        assert entries.queued == 1 and entries.pending
        assert set(entries.not_ready) == set()
        assert entries.states["app"].peek == -1
    finally:
        lo.close()
