"""The one way the agent opens a path a local user controls, without PCP: a file in an MMV
directory (the host's or a container's), a not-ready file opened again for its header, a
container's ``/etc/pcp.conf`` and the directories on the way to a container's MMV directory.

A file is first opened ``O_PATH | O_NOFOLLOW`` (which opens nothing: no FIFO waits for a
writer, no device's driver is called, a symlink is the link itself) and looked at with
``fstat``; only a regular file is then opened for reading, through ``/proc/self/fd`` (the
very inode looked at, whatever the name became meanwhile), ``O_NONBLOCK | O_CLOEXEC``.
Anything else raises :class:`NotRegular` and is never opened.  A path below a directory
descriptor (a container's root, ``/proc/<pid>/root``) is walked one component at a time,
each ``O_NOFOLLOW | O_DIRECTORY`` (a symlink or anything but a directory on the way is
refused, ``..`` too), so it never leaves that directory.  Reads are bounded by the caller
(:func:`read_head`).
"""

from __future__ import annotations

import errno
import os
import stat
from typing import Final

DIRECTORY: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
"""A directory opened to be listed (the last component of :func:`open_dir`)."""
_STEP: Final = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_LOOK: Final = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC
_READ: Final = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC


class NotRegular(OSError):
    """The path names something other than a regular file (a FIFO, a device, a symlink,
    ...), which was not opened; ``kind`` says what it is."""

    def __init__(self, path: str, st: os.stat_result) -> None:
        self.kind = kind(st.st_mode)
        super().__init__(errno.EINVAL, f"not a regular file ({self.kind})", path)
        self.st = st


def open_regular(path: str, dir_fd: int | None = None) -> tuple[int, os.stat_result]:
    """A descriptor (``O_RDONLY | O_NONBLOCK | O_CLOEXEC``) of the regular file ``path``
    (relative to ``dir_fd`` when given), its last component never followed, and its stat;
    raises :class:`NotRegular` (nothing opened) or OSError."""
    look = os.open(path, _LOOK, dir_fd=dir_fd)
    try:
        st = os.fstat(look)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegular(path, st)
        fd = os.open(f"/proc/self/fd/{look}", _READ)
    finally:
        os.close(look)
    try:
        return fd, os.fstat(fd)
    except BaseException:
        os.close(fd)
        raise


def open_dir(root: int, path: str, last: int = DIRECTORY) -> int:
    """The directory ``path`` (absolute or not) below the directory descriptor ``root``,
    walked one component at a time, never following a symlink (ELOOP or ENOTDIR) nor a
    ``..`` (EPERM); the last component opened with ``last``."""
    parts = [p for p in path.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise OSError(errno.EPERM, f"'..' in {path}")
    fd = os.open(".", _STEP, dir_fd=root)
    try:
        for i, part in enumerate(parts):
            nxt = os.open(part, last if i == len(parts) - 1 else _STEP, dir_fd=fd)
            os.close(fd)
            fd = nxt
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_beneath(root: int, path: str) -> tuple[int, os.stat_result]:
    """The regular file ``path`` below the directory descriptor ``root`` (:func:`open_dir`
    for its directory, :func:`open_regular` for it) and its stat."""
    head, _, name = path.rstrip("/").rpartition("/")
    if name in ("", ".", ".."):
        raise OSError(errno.EPERM, f"not a file name: {path}")
    parent = open_dir(root, head, _STEP)
    try:
        return open_regular(name, parent)
    finally:
        os.close(parent)


def read_head(fd: int, limit: int) -> bytes:
    """At most ``limit`` bytes from the start of the file ``fd``; raises OSError."""
    return os.pread(fd, limit, 0)


def kind(mode: int) -> str:
    """The file type of ``mode``, in words."""
    for test, name in (
        (stat.S_ISDIR, "directory"),
        (stat.S_ISFIFO, "FIFO"),
        (stat.S_ISSOCK, "socket"),
        (stat.S_ISCHR, "character device"),
        (stat.S_ISBLK, "block device"),
        (stat.S_ISLNK, "symlink"),
    ):
        if test(mode):
            return name
    return "special file"
