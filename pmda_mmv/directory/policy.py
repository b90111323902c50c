"""Which directory entries are read, without PCP: dot-files are ignored
(:func:`~.filestate.ignore_reason`); only regular files are read (FIFOs never block); a
symlink is followed only when its target is a regular file inside the same directory; when
``owners`` is given, only files owned by those uids are read.
"""

from __future__ import annotations

import os
import stat

from pmda_mmv.mmvfile.opener import kind


class Skip(Exception):
    """A directory entry that is not read; ``key`` identifies it until it changes."""

    def __init__(self, why: str, key: tuple[int, ...] | None) -> None:
        super().__init__(why)
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
        raise Skip("symlink in a container's directory, not followed", key(lst))
    if stat.S_ISLNK(lst.st_mode):
        target = os.path.realpath(path)
        if os.path.dirname(target) != os.path.realpath(directory):
            raise Skip("symlink out of the directory, not followed", key(lst))
        try:
            st = os.lstat(target)
        except OSError as e:
            raise Skip(f"symlink target: {e.strerror}", key(lst)) from None
    if not stat.S_ISREG(st.st_mode):
        raise Skip(f"not a regular file ({kind(st.st_mode)})", key(st))
    if owners is not None and st.st_uid not in owners:
        raise Skip(f"owner uid {st.st_uid} is not trusted", key(st))
    return target, st


def key(st: os.stat_result) -> tuple[int, ...]:
    """What identifies a skipped entry until it changes."""
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_mode, st.st_uid)
