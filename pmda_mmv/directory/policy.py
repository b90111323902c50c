"""Which directory entries are read, without PCP: dot-files are ignored
(:func:`~.filestate.ignore_reason`); only regular files are read (FIFOs never block); a
symlink is followed only when its target is a regular file inside the same directory; when
``owners`` is given, only files owned by those uids are read.
"""

from __future__ import annotations

import os
import stat

from pmda_mmv.mmvfile.errors import MmvError
from pmda_mmv.mmvfile.opener import kind


class Skip(MmvError):
    """A directory entry that is not read, as a problem of the whole entry (``path`` and
    ``message``: why); ``key`` identifies the entry until it changes (None: never the same)."""

    def __init__(self, *, path: str, message: str, key: tuple[int, ...] | None) -> None:
        super().__init__(path=path, message=message)
        self.key = key


def resolve(
    directory: str,
    path: str,
    lst: os.stat_result,
    owners: set[int] | None,
    follow: bool = True,
) -> tuple[str, os.stat_result]:
    """The path to open for the entry ``path`` of ``directory`` (whose lstat is ``lst``)
    and its stat; raises Skip for entries that are not read.  Without ``follow`` (a
    container's directory, :mod:`~.containers`) no symlink is followed."""
    target, st = path, lst
    if stat.S_ISLNK(lst.st_mode) and not follow:
        raise Skip(
            path=path,
            message="symlink in a container's directory, not followed",
            key=stat_identity(lst),
        )
    if stat.S_ISLNK(lst.st_mode):
        target = os.path.realpath(path)
        if os.path.dirname(target) != os.path.realpath(directory):
            raise Skip(
                path=path,
                message="symlink out of the directory, not followed",
                key=stat_identity(lst),
            )
        try:
            st = os.lstat(target)
        except OSError as e:
            raise Skip(
                path=path, message=f"symlink target: {e.strerror}", key=stat_identity(lst)
            ) from None
    if not stat.S_ISREG(st.st_mode):
        raise Skip(
            path=path, message=f"not a regular file ({kind(st.st_mode)})", key=stat_identity(st)
        )
    if owners is not None and st.st_uid not in owners:
        raise Skip(
            path=path, message=f"owner uid {st.st_uid} is not trusted", key=stat_identity(st)
        )
    return target, st


def stat_identity(st: os.stat_result) -> tuple[int, ...]:
    """What identifies a skipped entry until it changes."""
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_mode, st.st_uid)
