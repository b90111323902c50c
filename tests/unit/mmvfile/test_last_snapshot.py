"""``MmvFile.last_snapshot``: a departing file's last values, read through the descriptor
still open, while its generation is the one loaded."""

from __future__ import annotations

import os
from pathlib import Path

from pmda_mmv.mmvfile.reader import MmvFile
from tests.support.mmvbuild import new_generation, single


def values(mf: MmvFile) -> list[object]:
    snap = mf.last_snapshot()
    assert snap is not None
    return mf.column(snap, mf.metrics[0])


def test_a_live_file_gives_its_snapshot(tmp_path: Path) -> None:
    single(value=5).write(tmp_path / "f")
    with MmvFile.open(str(tmp_path / "f")) as mf:
        assert values(mf) == [5]


def test_an_unlinked_file_gives_its_last_values(tmp_path: Path) -> None:
    path = tmp_path / "f"
    single(value=5).write(path)
    with MmvFile.open(str(path)) as mf:
        single(value=9).write(path)  # counted on, in place
        single(value=1).write(tmp_path / "f.new")  # then restarted under the name
        os.rename(tmp_path / "f.new", path)
        assert values(mf) == [9]
        os.unlink(path)  # and removed: the inode is still the descriptor's
        assert values(mf) == [9]


def test_a_new_generation_or_a_closed_file_gives_nothing(tmp_path: Path) -> None:
    path = tmp_path / "f"
    single(value=5).write(path)
    with MmvFile.open(str(path)) as mf:
        new_generation(path, 0x5F5E1000000009)
        assert mf.last_snapshot() is None
    assert mf.last_snapshot() is None  # closed
