"""pmda_mmv.directory.filestate's one mapping from a verdict on a directory entry to its
state: every verdict is an error carrying the entry's problem (the reader's kinds, a
:class:`~.policy.Skip` of the directory's policy, a :class:`~.liveness.NoWriter` of the
writer search), and :func:`~.filestate.status_of` is the only translation to a state."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pmda_mmv.directory.filestate import EXITED, NO_WRITER, NOT_READY, REFUSED, status_of
from pmda_mmv.directory.liveness import NoWriter, Writers, writer_problem
from pmda_mmv.directory.policy import Skip, resolve
from pmda_mmv.mmvfile import layout
from pmda_mmv.mmvfile.errors import Changed, Corrupt, MmvError, NotReady, Problem, Refused
from pmda_mmv.mmvfile.reader import MmvFile
from tests.support import mmvbuild


@pytest.mark.parametrize(
    ("kind", "state"),
    [(NotReady, NOT_READY), (Changed, NOT_READY), (Refused, REFUSED), (Corrupt, REFUSED)],
)
def test_a_reader_error_maps_to_its_state(kind: type[MmvError], state: str) -> None:
    assert status_of(kind(path="/d/f", field="file", message="why")) == state


def test_a_skipped_entry_is_a_refused_problem_of_the_whole_entry(tmp_path: Path) -> None:
    path = str(tmp_path / "link")
    os.symlink("gone", path)
    with pytest.raises(Skip) as info:
        resolve(str(tmp_path), path, os.lstat(path), None)
    skip = info.value
    assert status_of(skip) == REFUSED
    assert skip.problem == Problem(path=path, message="symlink target: No such file or directory")
    assert str(skip.problem) == f"{path}: symlink target: No such file or directory"
    assert skip.key is not None


def test_no_writer_is_a_problem_of_the_header_process_field(tmp_path: Path) -> None:
    """Named by the path the search is given (the directory entry's, which may be a symlink
    to the file read), else by the file's own."""
    b = mmvbuild.single(3, 1, flags=layout.FLAG_PROCESS, process=-5)
    b.write(tmp_path / "neg")
    with MmvFile.open(str(tmp_path / "neg")) as mf:
        for named, path in ((None, mf.path), ("/d/link", "/d/link")):
            with pytest.raises(NoWriter) as info:
                Writers().open(mf, path=named)
            gone = info.value
            assert status_of(gone) == NO_WRITER
            assert gone.reason == "writer PID -5 is not a process ID"
            assert gone.problem == writer_problem(path, gone.reason)
            assert str(gone.problem) == (
                f"{path}: header.process at offset {layout.HEADER.at['process']}: writer PID -5"
                " is not a process ID (MMV_FLAG_PROCESS), file not served"
            )


def test_a_writer_found_then_exited_is_exited() -> None:
    assert status_of(NoWriter(path="/d/f", reason="writer process 7 has exited")) == NO_WRITER
    assert status_of(NoWriter(path="/d/f", reason="gone", exited=True)) == EXITED
