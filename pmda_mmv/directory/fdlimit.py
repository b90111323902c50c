"""Descriptors: the agent keeps one per served file (``pread``, :mod:`~.reader`) and one per
PROCESS file's writer (a pidfd, :mod:`~.liveness`), so their number is bounded by the
process's limit, never by what a local user writes into the directory.

At start the agent raises its soft ``RLIMIT_NOFILE`` to the hard limit (systemd's default
soft limit is 1,024; the C agent needs 3 descriptors however many files it maps).  The
scanner's served files and their writers' pidfds hold at most :func:`max_files`
descriptors, once RESERVE (listings, the log, pmcd's pipes, the watcher) and the backoff's
quarter (descriptors kept for files not ready) are set aside.  A file past it is refused with the
reason and retried when a served file leaves, so a listing never lacks a descriptor that
served files took.
"""

from __future__ import annotations

import resource
from typing import Final

RESERVE: Final = 64
"""Descriptors served files never take: the directory listing, the log, pmcd's pipes,
the watcher's inotify descriptor, python3-pcp's own."""


def raise_soft_limit() -> int:
    """Raise the soft RLIMIT_NOFILE to the hard one (when the kernel allows); returns the
    soft limit in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft != resource.RLIM_INFINITY and soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (OSError, ValueError):
            return soft
        return hard
    return soft


def soft_limit() -> int:
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return 1 << 20 if soft == resource.RLIM_INFINITY else soft


def max_files(limit: int | None = None) -> int:
    """Descriptors served files and their writers' pidfds may hold together under a
    descriptor ``limit`` (default: the soft limit in force): the limit less RESERVE and
    the backoff's quarter."""
    limit = soft_limit() if limit is None else limit
    return max(1, limit - RESERVE - limit // 4)
