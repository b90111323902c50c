"""The one opener of paths a local user controls (pmda_mmv/mmvfile/opener.py): only a
regular file is ever opened, never through a symlink, never blocking, and a path below a
directory descriptor never leaves it."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

import pytest

from pmda_mmv.mmvfile.opener import NotRegular, open_beneath, open_dir, open_regular


def plant(directory: Path) -> dict[str, str]:
    """A FIFO, a character device (/dev/null's 1:3), a symlink to a regular file and a
    directory in ``directory``: name -> the kind the opener must name."""
    (directory / "target").write_bytes(b"x" * 10)
    os.mkfifo(directory / "fifo")
    os.mknod(directory / "null", stat.S_IFCHR | 0o666, os.makedev(1, 3))
    (directory / "link").symlink_to(directory / "target")
    (directory / "sub").mkdir()
    return {"fifo": "FIFO", "null": "character device", "link": "symlink", "sub": "directory"}


def test_only_a_regular_file_is_opened(tmp_path: Path) -> None:
    """A FIFO with no writer does not block, a device is not opened (its atime stays), a
    symlink is the link: each raises NotRegular naming what it is."""
    for name, what in plant(tmp_path).items():
        with pytest.raises(NotRegular) as e:
            open_regular(str(tmp_path / name))
        assert e.value.kind == what
        assert e.value.strerror == f"not a regular file ({what})"
    fd, st = open_regular(str(tmp_path / "target"))
    try:
        assert st.st_size == 10 and os.pread(fd, 100, 0) == b"x" * 10
        assert os.get_blocking(fd) is False
        assert os.get_inheritable(fd) is False
    finally:
        os.close(fd)


def test_relative_to_a_directory_descriptor(tmp_path: Path) -> None:
    plant(tmp_path)
    d = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fd, _ = open_regular("target", d)
        os.close(fd)
        with pytest.raises(NotRegular):
            open_regular("link", d)
    finally:
        os.close(d)


def test_open_dir_never_follows_a_symlink_nor_dotdot(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "var" / "lib").mkdir(parents=True)
    (tmp_path / "host").mkdir()
    (root / "var" / "out").symlink_to(tmp_path / "host")
    (root / "var" / "in").symlink_to("lib")  # even one that stays inside
    os.mkfifo(root / "var" / "fifo")
    fd = os.open(root, os.O_PATH | os.O_DIRECTORY)
    try:
        got = open_dir(fd, "/var/lib")
        assert os.fstat(got).st_ino == (root / "var" / "lib").stat().st_ino
        assert os.listdir(got) == []
        os.close(got)
        for path in ("/var/out", "/var/in", "/var/out/x", "/var/fifo", "/var/fifo/x"):
            with pytest.raises(OSError) as e:
                open_dir(fd, path)
            assert e.value.errno in (errno.ELOOP, errno.ENOTDIR), path  # O_NOFOLLOW
        with pytest.raises(OSError) as e:
            open_dir(fd, "/var/../../host")
        assert e.value.errno == errno.EPERM
    finally:
        os.close(fd)


def test_open_beneath_opens_a_regular_file_below_the_root_only(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    kinds = plant(root / "etc")
    (tmp_path / "host").mkdir()
    (root / "up").symlink_to(tmp_path / "host")
    (tmp_path / "host" / "secret").write_text("host")
    fd = os.open(root, os.O_PATH | os.O_DIRECTORY)
    try:
        got, st = open_beneath(fd, "/etc/target")
        assert st.st_size == 10
        os.close(got)
        for path in [*(f"/etc/{name}" for name in kinds), "/etc/"]:
            with pytest.raises(NotRegular):
                open_beneath(fd, path)
        for path in ("/up/secret", "/etc/../../host/secret"):
            with pytest.raises(OSError) as e:
                open_beneath(fd, path)
            assert e.value.errno in (errno.ELOOP, errno.ENOTDIR, errno.EPERM), path
    finally:
        os.close(fd)
