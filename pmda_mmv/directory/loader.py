"""Opening and validating the entries of one MMV directory, one by one, without PCP.

:meth:`Loader.consider` looks at a list of names: each whose stat changed is resolved
(:mod:`~.policy`), checked against the resources (:mod:`~.resources`: ``max_total``, the
descriptors, hard links), opened and validated (:class:`~.reader.MmvFile`), its PROCESS
writer found (:mod:`~.liveness`); then :class:`~.entrytable.EntryTable` serves the opened
files in name order (first come, first served).  When it runs, and how much at a time, is
:mod:`~.scanner`'s part.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterable
from typing import Final

from pmda_mmv.directory.entrytable import EntryTable, Opened
from pmda_mmv.directory.filestate import (
    NOT_READY,
    REFUSED,
    Changes,
    FileState,
    status_of,
)
from pmda_mmv.directory.liveness import NoWriter, Searching, Writer
from pmda_mmv.directory.policy import Skip, resolve
from pmda_mmv.directory.resources import Inode
from pmda_mmv.mmvfile.errors import MmvError, Problem
from pmda_mmv.mmvfile.reader import MmvFile

LOAD_RATE: Final = 100e6
"""Bytes a second a load is assumed to take before one was measured (about 200 MB/s for
files of 1M values on the 2-core test machine)."""


class Loader:
    """Opens the entries of ``directory`` for its :attr:`entries` to serve, within
    ``limits``; see the module docstring (the scanner's options, with the same names)."""

    def __init__(
        self,
        directory: str,
        entries: EntryTable,
        *,
        owners: Iterable[int] | None,
        clock: Callable[[], float],
    ) -> None:
        self.directory = directory
        self._prefix = os.path.join(directory, "")
        self.entries = entries
        self.resources = entries.resources
        self.limits = entries.resources.limits
        self.owners = set(owners) if owners is not None else None
        self.clock = clock
        self.load_rate = LOAD_RATE  # bytes a second loads take here (measured: consider)
        self.skip_bytes: int | None = None  # consider leaves files this big for later
        self.skipped: list[str] = []  # the names consider left for later (skip_bytes)

    def _path(self, name: str) -> str:
        """The path of entry ``name``: in the directory, or in a container's."""
        scope, _, base = name.rpartition("/")
        if not scope:
            return self._prefix + name
        return f"{self.entries.scopes.get(scope, ('/nonexistent', {}))[0]}/{base}"

    def consider(
        self, names: Iterable[str], deadline: float | None = None
    ) -> tuple[Changes, str | None]:
        """(Re)load the named entries whose stat changed and serve them in name order (names
        are first come, first served); auto-assigned clusters avoid every requested one.
        Past ``deadline`` (once one entry was looked at) returns the first name not
        reached (None: all were)."""
        changes = Changes()
        opened: list[Opened] = []
        stop: str | None = None
        loading: dict[Inode, str] = {}
        self.skipped = []
        for i, name in enumerate(names):
            if deadline is not None and i and self.clock() >= deadline:
                stop = name
                break
            path = self._path(name)
            lst: os.stat_result | OSError
            try:
                lst = os.lstat(path)
            except (FileNotFoundError, NotADirectoryError):  # gone: forgotten
                if name in self.entries.states:
                    changes.extend(self.entries.forget(name))
                continue
            except OSError as e:
                lst = e  # reported by _load, as a refusal
            state = self.entries.state(name, changes)
            if self._heavy(state, lst):
                self.skipped.append(name)
                continue
            started = self.clock()
            try:
                loaded = self._load(state, path, lst, (loading, deadline), changes)
            except Exception as e:  # one file's fault never ends the scan
                self._unexpected(state, path, e, changes)
                continue
            if loaded is not None:
                self._measure(loaded[0].size, self.clock() - started)
                opened.append((state, *loaded))
                self.resources.opened(loaded[0].size, state.entry)
        self.resources.scanned()
        self.entries.serve_opened(opened, changes)
        return changes, stop

    def _heavy(self, state: FileState, lst: os.stat_result | OSError) -> bool:
        """Whether ``state`` is a file to leave for later in this pass: at least
        skip_bytes big (through a symlink: its target's size) but not past max_size (that
        refusal costs nothing), its stat changed."""
        if self.skip_bytes is None or isinstance(lst, OSError):
            return False
        size = lst.st_size
        if stat.S_ISLNK(lst.st_mode):
            try:
                size = os.stat(self._path(state.name)).st_size
            except OSError:
                return False
        key = (lst.st_dev, lst.st_ino, lst.st_size, lst.st_mtime_ns)
        return self.skip_bytes <= size <= self.limits.max_size and key != state.key

    def _measure(self, size: int, seconds: float) -> None:
        """Learn the load rate from a load of ``size`` bytes (files of 64 KiB or more)."""
        if size >= 1 << 16 and seconds > 0:
            self.load_rate = 0.7 * self.load_rate + 0.3 * (size / seconds)

    # -- one file

    def _unexpected(self, state: FileState, path: str, error: Exception, changes: Changes) -> None:
        """An unexpected exception loading ``state`` (a defect, or an environment the agent
        did not foresee) is this file's problem: refused with the exception named, looked
        at again when its stat changes; the other files of the scan are still served."""
        why = f"unexpected error while loading ({type(error).__name__}: {error}), not served"
        self.entries.set_state(state, REFUSED, Problem(path=path, message=why), changes)

    def _load(
        self,
        state: FileState,
        path: str,
        lst: os.stat_result | OSError,
        scan: tuple[dict[Inode, str], float | None],
        changes: Changes,
    ) -> tuple[MmvFile, Writer | None, Inode | None] | None:
        """Open the entry if its stat changed (or its key was reset for a retry), with its
        live writer when it is a PROCESS file; None when unchanged, not ready, refused or
        no live writer was found (state and log updated).  ``scan``: the inodes this scan
        opened so far, by name (a hard link to one of them is refused), and its deadline
        (the search for a writer goes on at the next request past it)."""
        loading, deadline = scan
        resolved = self._resolve(state, path, lst, changes)
        if resolved is None:
            return None
        target, st = resolved
        key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
        if key == state.key:
            return None
        if self._unchanged(state, key):
            return None
        state.key = key
        inode = None if target is not path else (st.st_dev, st.st_ino)
        if self._over(state, path, (st.st_size, inode, loading), changes):
            return None
        try:
            mf = MmvFile.open(target, max_size=self.limits.max_size, name=state.name)
        except MmvError as e:  # not ready, changed while read (retried) or refused
            status = status_of(e)
            self.entries.set_state(state, status, e.problem, changes)
            if status == NOT_READY:
                self.entries.keep_head(state, target, st)
            return None
        found = self._writer(state, mf, (path, deadline), changes)
        if found is None:
            return None
        if inode is not None:
            loading[inode] = state.name
        return mf, found[0], inode

    def _resolve(
        self, state: FileState, path: str, lst: os.stat_result | OSError, changes: Changes
    ) -> tuple[str, os.stat_result] | None:
        """The file the entry names and its stat, by the directory's policy; None when it
        is refused (state and log updated, unless refused so already)."""
        try:
            if isinstance(lst, OSError):
                raise Skip(path=path, message=f"cannot stat: {lst.strerror}", key=None)
            follow = "/" not in state.name  # a container's: no symlink (containers.py)
            return resolve(self.directory, path, lst, self.owners, follow)
        except Skip as skip:
            if skip.key is not None and skip.key == state.key:
                return None
            state.key = skip.key
            self.entries.set_state(state, status_of(skip), skip.problem, changes)
            return None

    def _writer(
        self,
        state: FileState,
        mf: MmvFile,
        at: tuple[str, float | None],
        changes: Changes,
    ) -> tuple[Writer | None] | None:
        """``mf``'s live writer (None for a file that is not a PROCESS one), in a tuple;
        ``at``: the entry's path (named in the problem) and the request's deadline;
        None when none was found (``mf`` closed, state and log updated) or the search
        goes on at the next request (queued again, PENDING)."""
        path, deadline = at
        try:
            return (self.entries.writers.open(mf, deadline, path=path),)
        except Searching:  # the walk of /proc goes on at the next request
            mf.close()
            self.entries.await_writer(state, changes)
            return None
        except NoWriter as e:
            mf.close()
            self.entries.set_state(state, status_of(e), e.problem, changes)
            return None
        except BaseException:
            mf.close()  # its descriptor is not left open by an unexpected error
            raise

    def _unchanged(self, state: FileState, key: tuple[int, ...]) -> bool:
        """A served file whose writer only wrote values (same inode and size, its mtime
        moved: a mapping's writes move it) and whose generation pair is the one loaded
        is not loaded again: its entry, tables and snapshot stay (``key`` kept)."""
        entry = state.entry
        if entry is None or state.key is None or state.key[:3] != key[:3]:
            return False
        try:
            entry.mf.check_generation()
        except MmvError:
            return False
        state.key = key
        return True

    def _over(
        self,
        state: FileState,
        path: str,
        opening: tuple[int, Inode | None, dict[Inode, str]],
        changes: Changes,
    ) -> bool:
        """Refuse ``state`` (a file of ``size`` bytes, from ``inode``, None through a
        symlink, with ``loading`` the inodes this scan opened) when it is a hard link of
        a file served under another name, or serving it would take the served files past
        max_total or the descriptor limit (retried when a file leaves)."""
        size, inode, loading = opening
        resources, was = self.resources, state.entry
        if inode is not None:
            why = resources.linked(state.name, path, inode, loading)
            if why is not None:  # looked at again when the name it is a link of goes
                self.entries.set_state(state, REFUSED, why, changes)
                return True
        open = (len(self.entries.catalogue.files), self.entries.writers.watched)
        why = resources.over_total(path, size, was) or resources.over_files(path, was, open)
        if why is None:
            return False
        self.entries.refuse_starved(state, why, changes)  # retried when a file leaves
        return True
