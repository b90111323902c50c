"""pmda_mmv.directory.policy: which directory entries are read, on real entries of a
directory (no pmcd): regular files are, symlinks only to a regular file of the same
directory, other kinds never (and a FIFO is never opened), ``owners`` restricts by uid; a
skipped entry's key changes exactly when the entry does."""

from __future__ import annotations

import os
import socket
import stat
from pathlib import Path

import pytest

from pmda_mmv.directory.policy import Skip, kind, resolve, stat_identity


def lstat_resolve(directory: Path, name: str, owners: set[int] | None = None) -> tuple[str, int]:
    """resolve() as the scanner calls it: the path it opens and that file's inode."""
    path = str(directory / name)
    target, st = resolve(str(directory), path, os.lstat(path), owners)
    return target, st.st_ino


def skipped(directory: Path, name: str, owners: set[int] | None = None) -> Skip:
    path = str(directory / name)
    with pytest.raises(Skip) as info:
        resolve(str(directory), path, os.lstat(path), owners)
    return info.value


def test_a_regular_file_is_read_where_it_is(tmp_path: Path) -> None:
    (tmp_path / "app").write_bytes(b"MMV")
    ino = (tmp_path / "app").stat().st_ino
    assert lstat_resolve(tmp_path, "app") == (str(tmp_path / "app"), ino)


def test_a_symlink_to_a_file_of_the_directory_is_followed(tmp_path: Path) -> None:
    (tmp_path / "real").write_bytes(b"MMV")
    (tmp_path / "link").symlink_to("real")
    target, ino = lstat_resolve(tmp_path, "link")
    assert target == os.path.realpath(tmp_path / "real")
    assert ino == (tmp_path / "real").stat().st_ino


@pytest.mark.parametrize("where", ["outside", "subdirectory"])
def test_a_symlink_out_of_the_directory_is_not_followed(tmp_path: Path, where: str) -> None:
    served = tmp_path / "mmv"
    other = tmp_path / "elsewhere" if where == "outside" else served / "sub"
    served.mkdir()
    other.mkdir(parents=True, exist_ok=True)
    (other / "f").write_bytes(b"MMV")
    (served / "link").symlink_to(other / "f")
    err = skipped(served, "link")
    assert err.message == "symlink out of the directory, not followed"
    assert err.key == stat_identity(os.lstat(served / "link"))  # the link's own identity


def test_a_dangling_symlink_is_skipped_with_the_reason(tmp_path: Path) -> None:
    (tmp_path / "link").symlink_to("gone")
    assert skipped(tmp_path, "link").message == "symlink target: No such file or directory"


def test_a_symlink_to_a_symlink_of_the_directory_is_read_at_its_end(tmp_path: Path) -> None:
    (tmp_path / "real").write_bytes(b"MMV")
    (tmp_path / "one").symlink_to("real")
    (tmp_path / "two").symlink_to("one")
    assert lstat_resolve(tmp_path, "two")[0] == os.path.realpath(tmp_path / "real")


def make_fifo(path: Path) -> None:
    os.mkfifo(path)


def make_socket(path: Path) -> None:
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(path))
    s.close()


def make_dir(path: Path) -> None:
    path.mkdir()


@pytest.mark.parametrize(
    ("make", "what"),
    [(make_fifo, "FIFO"), (make_socket, "socket"), (make_dir, "directory")],
    ids=["fifo", "socket", "directory"],
)
def test_other_kinds_are_skipped_naming_the_kind(tmp_path: Path, make: object, what: str) -> None:
    """Decided from the stat alone: a FIFO is never opened, so it cannot block."""
    make(tmp_path / "entry")  # type: ignore[operator]
    err = skipped(tmp_path, "entry")
    assert err.message == f"not a regular file ({what})"
    assert err.key == stat_identity(os.stat(tmp_path / "entry"))


def test_a_symlink_to_a_fifo_of_the_directory_is_skipped_as_a_fifo(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe")
    (tmp_path / "link").symlink_to("pipe")
    assert skipped(tmp_path, "link").message == "not a regular file (FIFO)"


def test_owners_restrict_by_uid(tmp_path: Path) -> None:
    (tmp_path / "app").write_bytes(b"MMV")
    uid = os.stat(tmp_path / "app").st_uid
    assert lstat_resolve(tmp_path, "app", {uid})[0] == str(tmp_path / "app")
    assert lstat_resolve(tmp_path, "app", None)[0] == str(tmp_path / "app")
    err = skipped(tmp_path, "app", {uid + 1})
    assert err.message == f"owner uid {uid} is not trusted"
    assert skipped(tmp_path, "app", set()).key == stat_identity(os.stat(tmp_path / "app"))


def test_the_key_of_a_skipped_entry_changes_when_the_entry_does(tmp_path: Path) -> None:
    """The scanner does not look at a skipped entry again until its key changes."""
    path = tmp_path / "app"
    path.write_bytes(b"MMV")
    before = stat_identity(os.stat(path))
    assert stat_identity(os.stat(path)) == before
    path.write_bytes(b"MMV2")  # size
    assert stat_identity(os.stat(path)) != before
    before = stat_identity(os.stat(path))
    path.chmod(0o600)  # mode
    assert stat_identity(os.stat(path)) != before
    before = stat_identity(os.stat(path))
    os.utime(path, ns=(0, 12345))  # mtime
    assert stat_identity(os.stat(path)) != before


@pytest.mark.parametrize(
    ("mode", "name"),
    [
        (stat.S_IFDIR, "directory"),
        (stat.S_IFIFO, "FIFO"),
        (stat.S_IFSOCK, "socket"),
        (stat.S_IFCHR, "character device"),
        (stat.S_IFBLK, "block device"),
        (stat.S_IFLNK, "symlink"),
        (0, "special file"),
    ],
)
def test_kind_names_every_file_type(mode: int, name: str) -> None:
    assert kind(mode | 0o644) == name
