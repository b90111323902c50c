"""Discovery and lifecycle of the files in one MMV directory, without PCP.

:class:`Scanner` keeps every directory entry's state and the :class:`~.catalogue.Catalogue`
of served files up to date, incrementally: :meth:`Scanner.refresh` runs at the start of each
request (as the C agent's ``mmv_reload_maybe`` does) and costs one ``stat`` of the directory
when nothing changed.  It rescans the listing when the directory changed (mtime, or an event
queued by :mod:`~.watcher`), retries only the files that were not ready, and checks the
generation pair and writer process of every served file at most every ``check_interval``
seconds.  Unchanged files keep their descriptor, tables, cluster and PMIDs.

Policies: dot-files are ignored; only regular files are read (FIFOs never block); a symlink
is followed only when its target is a regular file inside the same directory; when
``owners`` is given, only files owned by those uids are served; files larger than
``max_size`` are refused.  Every refusal is logged once per change of the file; a file that
is not ready (empty, header or generation not written yet) is logged once it has stayed so
for ``not_ready_grace`` seconds, since every writer passes through those states.
"""

from __future__ import annotations

import os
import stat
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Final

import psutil

from .catalogue import Catalogue, FileEntry, Log, remember
from .reader import DEFAULT_MAX_SIZE, Changed, MmvError, MmvFile, NotReady, printable

OK: Final = "ok"
PARTIAL: Final = "partial"
NOT_READY: Final = "not-ready"
NOT_READY_GRACE: Final = 1.0  # seconds a file may stay not ready before it is logged
REFUSED: Final = "refused"
EXITED: Final = "exited"
"""States of a directory entry, as ``mmv.control.file.state`` reports them."""


@dataclass(slots=True)
class FileState:
    """What the agent knows of one directory entry: ``state`` (see the module constants),
    ``problems`` (one line each, newest last), the served ``entry`` (or None), the stat
    ``key`` it was last looked at with, and a stable ``instance`` id for the status indom."""

    name: str
    instance: int
    state: str = ""
    problems: list[str] = field(default_factory=list)
    entry: FileEntry | None = None
    key: tuple[int, ...] | None = (-1,)
    process: psutil.Process | None = None
    log_after: float = 0.0  # while not ready: when its problem is worth a log line

    @property
    def last_problem(self) -> str:
        return self.problems[-1] if self.problems else ""


@dataclass(slots=True)
class Changes:
    """Entries the agent must stop serving (``removed``) and start serving (``added``), in that
    order; ``states`` is True when any directory entry's state changed."""

    removed: list[FileEntry] = field(default_factory=list)
    added: list[FileEntry] = field(default_factory=list)
    states: bool = False

    def __bool__(self) -> bool:
        return bool(self.removed or self.added or self.states)

    def extend(self, other: Changes) -> None:
        """Append ``other``; an entry added here and removed there was never served, so it
        leaves both lists."""
        for entry in other.removed:
            if any(a is entry for a in self.added):
                self.added = [a for a in self.added if a is not entry]
            else:
                self.removed.append(entry)
        self.added += other.added
        self.states |= other.states


CHECK_BUDGET: Final = 64
"""Served files whose generation and writer one periodic check looks at (round robin)."""

UNSEEN: Final = (-1,)
"""Stat key of an entry not looked at yet (or to be looked at again)."""

MAX_DIRTY: Final = 4096
"""Names queued (one each, however many events) before the queue becomes one listing."""

ALL: Final = "\0all"
"""Marker queued by the watcher when the whole directory must be listed again."""


class Scanner:
    """State of one MMV directory; see the module docstring.  Not thread-safe except for
    :meth:`mark_dirty`, which the watcher thread calls."""

    def __init__(
        self,
        directory: str,
        catalogue: Catalogue,
        *,
        max_size: int = DEFAULT_MAX_SIZE,
        owners: Iterable[int] | None = None,
        check_interval: float = 0.05,
        not_ready_grace: float = NOT_READY_GRACE,
        log: Log | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.directory = directory
        self.catalogue = catalogue
        self.max_size = max_size
        self.owners = set(owners) if owners is not None else None
        self.check_interval = check_interval
        self.not_ready_grace = not_ready_grace
        sink: Log = log or (lambda line: None)
        self.log: Log = lambda line: sink(printable(line))
        self.clock = clock
        self.states: dict[str, FileState] = {}
        self.reload_requested = False
        self.rescans = 0
        self._dir_key: tuple[int, ...] | None = None
        self._dir_error: str | None = None
        self._list_error: str | None = None
        self._last_check = float("-inf")
        self._check_from = 0  # where the next periodic check starts, in served-name order
        self._instances: dict[str, int] = {}  # name -> status instance id (catalogue.remember)
        self._next_instance = 0
        self._dirty: set[str] = set()
        self._not_ready: set[str] = set()  # names whose state is NOT_READY
        self._dirty_lock = threading.Lock()

    # -- queries

    @property
    def pending(self) -> bool:
        """True while a rescan is pending: a file is not ready, or a reload was requested
        (what ``mmv.control.reload`` reports)."""
        return self.reload_requested or bool(self._not_ready)

    def served(self) -> list[FileEntry]:
        return list(self.catalogue.files.values())

    # -- triggers

    def mark_dirty(self, name: str = ALL) -> None:
        """Queue a check of ``name`` (or of the whole directory); safe from any thread."""
        with self._dirty_lock:
            if len(self._dirty) < MAX_DIRTY:
                self._dirty.add(name)
            else:  # bounded: that many changes are cheaper as one listing
                self._dirty = {ALL}

    def _take_dirty(self) -> set[str]:
        with self._dirty_lock:
            dirty, self._dirty = self._dirty, set()
        return dirty

    # -- the per-request check

    def refresh(self, force: bool = False) -> Changes:
        """Bring the catalogue up to date with the directory; returns what changed."""
        changes = Changes()
        dirty = self._take_dirty()
        if force or self.reload_requested or ALL in dirty or self._directory_changed():
            self.reload_requested = False
            changes.extend(self._rescan())
        else:
            names = sorted(dirty | self._not_ready)
            if names:
                changes.extend(self._consider(names))
        now = self.clock()
        if force or now - self._last_check >= self.check_interval:
            self._last_check = now
            changes.extend(self._check_served(None if force else CHECK_BUDGET))
        return changes

    def reload(self, name: str) -> Changes:
        """Load ``name`` again now (its values read as changed)."""
        if name in self.states:
            self.states[name].key = UNSEEN
        return self._consider([name])

    def _directory_changed(self) -> bool:
        try:
            st = os.stat(self.directory)
        except OSError as e:
            error = e.strerror or str(e)
            changed = error != self._dir_error
            self._dir_error, self._dir_key = error, None
            return changed
        key = (st.st_dev, st.st_ino, st.st_mtime_ns)
        changed = key != self._dir_key or self._dir_error is not None
        self._dir_key, self._dir_error = key, None
        return changed

    # -- listing

    def _rescan(self) -> Changes:
        self.rescans += 1
        self._directory_changed()
        try:
            names = sorted(n for n in os.listdir(self.directory) if not n.startswith("."))
            self._list_error = None
        except OSError as e:
            if e.strerror != self._list_error:  # once per new error, not per request
                self.log(f"{self.directory}: cannot list directory: {e.strerror}")
            self._list_error = e.strerror
            names = []
        changes = Changes()
        for gone in sorted(set(self.states) - set(names)):
            changes.extend(self._forget(gone))
        changes.extend(self._consider(names))
        return changes

    def _forget(self, name: str) -> Changes:
        state = self.states.pop(name)
        self._not_ready.discard(name)
        changes = Changes(states=True)
        if state.entry is not None:
            changes.removed.append(self._unserve(state))
        return changes

    def _unserve(self, state: FileState) -> FileEntry:
        entry = self.catalogue.remove(state.name)
        assert entry is not None and entry is state.entry
        state.entry = None
        entry.mf.close()
        return entry

    def _consider(self, names: list[str]) -> Changes:
        """(Re)load the named entries whose stat changed and serve them in name order (names
        are first come, first served); auto-assigned clusters avoid every requested one."""
        changes = Changes()
        opened: list[tuple[FileState, MmvFile]] = []
        for name in names:
            if not os.path.lexists(os.path.join(self.directory, name)):
                if name in self.states:
                    changes.extend(self._forget(name))
                continue
            state = self.states.get(name)
            if state is None:
                state = self.states[name] = FileState(name, self._instance(name))
                changes.states = True
            mf = self._load(state, changes)
            if mf is not None:
                opened.append((state, mf))
        requested = {e.mf.header.cluster for e in self.catalogue.files.values()}
        requested |= {mf.header.cluster for _, mf in opened}
        requested.discard(0)
        for state, mf in sorted(opened, key=lambda p: p[0].name):  # first in name order wins
            self._serve(state, mf, requested - {mf.header.cluster}, changes)
        return changes

    def _instance(self, name: str) -> int:
        """The status instance id of ``name``: kept while remembered, never reused."""
        inst = self._instances.get(name)
        if inst is None:
            inst, self._next_instance = self._next_instance, self._next_instance + 1
            remember(self._instances, name, inst, self.states)
        return inst

    # -- one file

    def _load(self, state: FileState, changes: Changes) -> MmvFile | None:
        """Open the entry if its stat changed (or it was not ready); None when unchanged,
        not ready or refused (state and log updated)."""
        path = os.path.join(self.directory, state.name)
        try:
            target, st = self._resolve(path)
        except _Skip as skip:
            if skip.key is not None and skip.key == state.key:
                return None
            state.key = skip.key
            self._set(state, REFUSED, f"{path}: {skip}", changes)
            return None
        key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
        if key == state.key and state.state != NOT_READY:
            return None
        state.key = key
        try:
            mf = MmvFile.open(target, max_size=self.max_size, name=state.name)
        except NotReady as e:
            self._set(state, NOT_READY, str(e), changes)
            return None
        except MmvError as e:
            self._set(state, REFUSED, str(e), changes)
            return None
        if not self._writer_alive(state, mf):
            mf.close()
            self._set(state, EXITED, self._exit_reason(path, mf), changes)
            return None
        return mf

    def _resolve(self, path: str) -> tuple[str, os.stat_result]:
        """The path to open and its stat; raises _Skip for entries that are not served."""
        try:
            lst = os.lstat(path)
        except OSError as e:
            raise _Skip(f"cannot stat: {e.strerror}", None) from None
        target, st = path, lst
        if stat.S_ISLNK(lst.st_mode):
            target = os.path.realpath(path)
            if os.path.dirname(target) != os.path.realpath(self.directory):
                raise _Skip("symlink out of the directory, not followed", _key(lst))
            try:
                st = os.lstat(target)
            except OSError as e:
                raise _Skip(f"symlink target: {e.strerror}", _key(lst)) from None
        if not stat.S_ISREG(st.st_mode):
            raise _Skip(f"not a regular file ({_kind(st.st_mode)})", _key(st))
        if self.owners is not None and st.st_uid not in self.owners:
            raise _Skip(f"owner uid {st.st_uid} is not trusted", _key(st))
        return target, st

    def _serve(self, state: FileState, mf: MmvFile, requested: set[int], changes: Changes) -> None:
        if state.entry is not None:
            changes.removed.append(self._unserve(state))
        entry = self.catalogue.add(mf, requested)
        if entry is None:
            mf.close()
            self._set(state, REFUSED, self.catalogue.refusal, changes, logged=True)
            return
        state.entry = entry
        for problem in mf.problems:
            self.log(str(problem))  # the catalogue logged its own (entry.problems)
        problems = [str(p) for p in mf.problems] + [f"{mf.path}: {p}" for p in entry.problems]
        status = PARTIAL if problems else OK
        state.problems = [printable(p) for p in problems]
        state.state = status
        self._not_ready.discard(state.name)
        changes.added.append(entry)
        changes.states = True

    def _set(
        self, state: FileState, new: str, problem: str, changes: Changes, logged: bool = False
    ) -> None:
        problem = printable(problem)
        if state.entry is not None:
            changes.removed.append(self._unserve(state))
        changed = state.state != new or state.last_problem != problem
        if new == NOT_READY:  # logged only if it stays so: writers pass through it
            now = self.clock()
            if state.state != NOT_READY:
                state.log_after = now + self.not_ready_grace
            if now >= state.log_after:
                state.log_after = float("inf")
                self.log(problem)
            self._not_ready.add(state.name)
        else:
            if changed and not logged:
                self.log(problem)
            self._not_ready.discard(state.name)
        if changed:
            changes.states = True
        state.state = new
        state.problems = [problem]

    # -- served files: generation and writer

    def _check_served(self, budget: int | None) -> Changes:
        """Check the generation and writer of served files: all of them, or ``budget``
        of them, continuing where the last check stopped."""
        changes = Changes()
        stale: list[str] = []
        served = [(n, s, s.entry) for n, s in self.states.items() if s.entry is not None]
        if budget is not None and len(served) > budget:
            start = self._check_from % len(served)
            self._check_from = start + budget
            served = (served + served)[start : start + budget]
        for name, state, entry in served:
            try:
                entry.mf.check_generation()
            except Changed:
                stale.append(name)
                continue
            if not self._writer_alive(state, entry.mf):
                self._set(state, EXITED, self._exit_reason(entry.mf.path, entry.mf), changes)
        if stale:
            for name in stale:
                self.states[name].key = UNSEEN
            changes.extend(self._consider(stale))
        return changes

    def _writer_alive(self, state: FileState, mf: MmvFile) -> bool:
        """MMV_FLAG_PROCESS: the writer (header.process) still runs and is the same process
        (it started before the file's generation, when that is a libpcp_mmv timestamp)."""
        pid = mf.header.process
        if not mf.header.process_flag or pid == 0:
            state.process = None
            return True
        proc = state.process
        try:
            if proc is None or proc.pid != pid:
                proc = state.process = psutil.Process(pid)
                if (
                    _plausible_time(mf.header.created)
                    and proc.create_time() > mf.header.created + 1
                ):
                    return False
            return bool(proc.is_running())
        except (psutil.Error, OSError, ValueError):
            return False

    @staticmethod
    def _exit_reason(path: str, mf: MmvFile) -> str:
        return (
            f"{path}: header.process at offset 32: writer process {mf.header.process} "
            "has exited (MMV_FLAG_PROCESS), file not served"
        )


class _Skip(Exception):
    """A directory entry that is not read; ``key`` identifies it until it changes."""

    def __init__(self, why: str, key: tuple[int, ...] | None) -> None:
        super().__init__(why)
        self.key = key


def _key(st: os.stat_result) -> tuple[int, ...]:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_mode, st.st_uid)


def _kind(mode: int) -> str:
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


def _plausible_time(t: float) -> bool:
    """Whether a header generation decodes to a time since 2000 and not in the future."""
    return 946684800 <= t <= time.time() + 86400
