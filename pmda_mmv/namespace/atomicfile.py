"""Files the agent writes for itself (the identity registry, its journal, its secret):
written whole or not at all.

:func:`write_all` writes every byte or raises: ``os.write`` may write fewer than it is given
(a filesystem left with one page free), and a file written short, fsynced and renamed over
a good one loses what the good one held.  :func:`write_atomically` replaces a file by a
temporary one beside it, written whole, fsynced and renamed, then syncs the directory; on
any failure the temporary file is removed and the file at the path is the one before.
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Callable


def write_all(fd: int, data: bytes) -> None:
    """Write all of ``data`` to ``fd``; OSError (ENOSPC when a write wrote nothing) when
    that failed, part of it possibly written."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        if written <= 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        view = view[written:]


def write_atomically(
    path: str, data: bytes, renamed: Callable[[], None] | None = None, mode: int = 0o644
) -> None:
    """Replace the file at ``path`` by ``data`` (``mode``) atomically; OSError when that
    failed (the temporary file removed, the file at ``path`` as it was).  ``renamed`` runs
    once the file is in place, before the directory is synced (the registry writes its
    secret there)."""
    directory = os.path.dirname(path) or "."
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        try:  # never through a name planted before (a symlink to a file pcp may write)
            fd = os.open(tmp, flags, mode)
        except FileExistsError:  # left by an agent of this PID killed mid-save, or planted
            os.unlink(tmp)
            fd = os.open(tmp, flags, mode)
        try:
            write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(tmp, path)
        if renamed is not None:
            renamed()
        dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
