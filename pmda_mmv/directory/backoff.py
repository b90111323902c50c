"""Files not ready (empty, header or generation not written yet, g1 != g2), retried with
backoff, without PCP.

Retried at the next request, then after RETRY_FIRST seconds, doubling up to RETRY_MAX; at
once when a watcher event names the file or its stat changed (the scanner's part); at most
RETRY_BUDGET such retries per request (files that have waited less go first).  A retry reads
the header through a descriptor kept while the file is not ready (up to a quarter of the
descriptor limit, opened when the file is first found not ready) and opens the file again
only when the header changed.  Logged once it has stayed so for the scanner's
``not_ready_grace`` seconds, since every writer passes through those states.
"""

from __future__ import annotations

import os
import resource
from collections import deque
from typing import Final

from pmda_mmv.directory.filestate import NOT_READY, FileState
from pmda_mmv.mmvfile import layout
from pmda_mmv.mmvfile.errors import MmvError, NotReady
from pmda_mmv.mmvfile.opener import open_regular, read_head
from pmda_mmv.mmvfile.parse.header import read_header
from pmda_mmv.mmvfile.pcpdefs import Log

RETRY_FIRST: Final = 0.05  # seconds before the second retry of a file not ready
RETRY_MAX: Final = 4.0  # the longest a file not ready waits between retries
RETRY_BUDGET: Final = 16  # retries (header reads or reopens) of files not ready per request


class Backoff:
    """The pending retries of the files not ready among ``states`` (the scanner's)."""

    def __init__(self, states: dict[str, FileState], log: Log) -> None:
        self.states = states
        self.log = log
        self.retries = 0  # retries of files not ready so far (header reads or reopens)
        self._waiting: dict[float, deque[tuple[float, int, str]]] = {}  # delay -> retries
        self._number = 0
        self._peeks = 0  # descriptors held for files not ready (FileState.peek)
        self._max_peeks = resource.getrlimit(resource.RLIMIT_NOFILE)[0] // 4

    def schedule(self, state: FileState, delay: float, when: float) -> None:
        """Retry ``state`` (not ready) at ``when``, in the queue of its ``delay``: files
        that have waited less go first."""
        self._number += 1
        state.retry = self._number
        self._waiting.setdefault(delay, deque()).append((when, self._number, state.name))

    def due(self, now: float) -> set[str]:
        """The files not ready whose retry is due (RETRY_BUDGET at most, those that have
        waited less first) and whose header changed since they were last opened (read
        through a descriptor kept for it); the others wait longer."""
        due: set[str] = set()
        tried = 0
        for delay in sorted(self._waiting):
            queue = self._waiting[delay]
            while queue and queue[0][0] <= now and tried < RETRY_BUDGET:
                _, number, name = queue.popleft()
                state = self.states.get(name)
                if state is None or state.state != NOT_READY or state.retry != number:
                    continue
                tried += 1
                if state.head is not None and _read_head(state.peek) == state.head:
                    self.wait_more(state, now)
                else:
                    due.add(name)
        self.retries += tried
        return due

    def not_ready(self, state: FileState, now: float, grace: float) -> None:
        """``state`` was found not ready: retried at the next request when it was not so
        already (logged once it stays so ``grace`` seconds), else it waits more."""
        if state.state != NOT_READY:
            state.log_after = now + grace
            state.delay = 0.0
            self.schedule(state, 0.0, now)
        else:
            self.wait_more(state, now)

    def wait_more(self, state: FileState, now: float) -> None:
        """``state`` is still not ready: back off, and log it once it stayed so."""
        state.delay = min(max(2 * state.delay, RETRY_FIRST), RETRY_MAX)
        self.schedule(state, state.delay, now + state.delay)
        if now >= state.log_after:
            state.log_after = float("inf")
            self.log(str(state.last_problem))

    def keep_head(self, state: FileState, target: str, st: os.stat_result) -> None:
        """Remember the header of a file that was found not ready, read through a kept
        descriptor, when it is itself not ready (it may be newer than what open saw)."""
        head = self._peek(state, target, st)
        state.head = head if head is not None and _waits(target, head) else None

    def _peek(self, state: FileState, target: str, st: os.stat_result) -> bytes | None:
        """The header of a file that was not ready, read through a descriptor kept while it
        stays so (None when it cannot be opened, or the name no longer leads to the inode
        the loader found): opened as the loader opens it (:func:`~.opener.open_regular`),
        so a symlink or FIFO swapped in for it is never followed nor opened."""
        inode = (st.st_dev, st.st_ino)
        if state.peek >= 0 and state.peek_inode != inode:
            self.unpeek(state)
        if state.peek < 0:
            if self._peeks >= self._max_peeks:
                return None
            try:
                fd, opened = open_regular(target)
            except OSError:
                return None
            if (opened.st_dev, opened.st_ino) != inode:  # another file by now: not kept
                os.close(fd)
                return None
            state.peek, state.peek_inode = fd, inode
            self._peeks += 1
        return _read_head(state.peek)

    def unpeek(self, state: FileState) -> None:
        """Close the descriptor kept for ``state``, if any."""
        fd, state.peek, state.head = state.peek, -1, None
        if fd >= 0:
            os.close(fd)
            self._peeks -= 1


def _waits(path: str, head: bytes) -> bool:
    """Whether a file whose first bytes are ``head`` is not ready (parse.header.read_header)."""
    if not head:
        return True  # empty
    if len(head) < layout.HEADER_SIZE:
        return False
    try:
        read_header(path, head, layout.HEADER_SIZE)
    except NotReady:
        return True
    except MmvError:
        return False
    return False


def _read_head(fd: int) -> bytes | None:
    """A file's first HEADER_SIZE bytes (fewer when it is shorter); None when unreadable."""
    try:
        return read_head(fd, layout.HEADER_SIZE)
    except OSError:
        return None
