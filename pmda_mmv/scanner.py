"""Discovery and lifecycle of the files in one MMV directory, without PCP.

:class:`Scanner` keeps every directory entry's state and the :class:`~.catalogue.Catalogue`
of served files up to date, incrementally: :meth:`Scanner.refresh` runs at the start of each
request (as the C agent's ``mmv_reload_maybe`` does) and costs one ``stat`` of the directory
and one ``epoll_wait`` when nothing changed.  It rescans the listing when the directory
changed (mtime, or an event queued by :mod:`~.watcher`), retries the files that are not
ready as their backoff says, and checks the generation pair of served files at most every
``check_interval`` seconds.  Unchanged files keep their descriptor, tables, cluster and PMIDs.

Budget: loading, validating and cataloguing stop once a request has spent ``budget``
seconds on them (BUDGET; at least one file is loaded per request); the names not reached
stay queued, in order, state PENDING, and the next requests go on with them.  A forced
refresh (the first scan of an agent pmcd started with ``notready``, ``pmda-mmv debug``)
is not bounded.

Not ready (empty, header or generation not written yet, g1 != g2): retried at the next
request, then after RETRY_FIRST seconds, doubling up to RETRY_MAX; at once when a watcher
event names the file or its stat changed; at most RETRY_BUDGET such retries per request
(files that have waited less go first).  A retry reads the header through a descriptor
kept while the file is not ready (up to a quarter of the descriptor limit, opened when the
file is first found not ready) and opens the file again only when the header changed.
Logged once it has stayed so for ``not_ready_grace`` seconds, since every writer passes
through those states.

MMV_FLAG_PROCESS: each served file's writer is watched through a ``pidfd_open(2)``
descriptor, all of them in one epoll set polled at the start of every request, so a writer's
exit removes its file at the next request whatever the number of files (a zombie has exited
too).  Without pidfds (Linux < 5.3, or out of descriptors) psutil checks the process at the
periodic check.  A live process that started more than PID_SLACK seconds after the file's
creation (:func:`~.layout.generation_time`) is not its writer but a reused PID.

Resources: a file refused, or an indom left out, for want of a cluster or an indom serial
is retried when the catalogue frees one (in name order, until one is still refused).

Policies: dot-files are ignored; only regular files are read (FIFOs never block); a symlink
is followed only when its target is a regular file inside the same directory; when
``owners`` is given, only files owned by those uids are served; files larger than
``max_size`` are refused.  Every refusal is logged once per change of the file.
"""

from __future__ import annotations

import errno
import os
import pwd
import resource
import select
import stat
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

from . import layout as fmt
from .catalogue import Catalogue, FileEntry, Log, remember
from .errors import Changed, MmvError, NotReady
from .parse.header import read_header
from .reader import DEFAULT_MAX_SIZE, MmvFile
from .rules import printable

if TYPE_CHECKING:
    import psutil  # imported where used: check and debug need it only for PROCESS files

OK: Final = "ok"
PARTIAL: Final = "partial"
NOT_READY: Final = "not-ready"
NOT_READY_GRACE: Final = 1.0  # seconds a file may stay not ready before it is logged
REFUSED: Final = "refused"
PENDING: Final = "pending"  # found, queued for loading by a later request (budget)
EXITED: Final = "exited"
IGNORED: Final = "ignored"
"""States of a directory entry, as ``mmv.control.file.state`` reports them (``ignored``
entries, :func:`ignore_reason`, have no state: only ``pmda-mmv check`` lists them)."""


def ignore_reason(name: str) -> str | None:
    """Why the directory entry ``name`` is not even looked at, or None when it is."""
    return "dot-file, ignored" if name.startswith(".") else None


def parse_owners(spec: str | None) -> tuple[int, ...] | None:
    """``--owners``: comma-separated user names or uids (None: any owner); raises
    ValueError naming an unknown user."""
    if not spec:
        return None
    uids = []
    for word in (w.strip() for w in spec.split(",")):
        try:
            uids.append(int(word) if word.isdigit() else pwd.getpwnam(word).pw_uid)
        except KeyError:
            raise ValueError(f"--owners: unknown user {word!r}") from None
    return tuple(uids)


RETRY_FIRST: Final = 0.05  # seconds before the second retry of a file not ready
RETRY_MAX: Final = 4.0  # the longest a file not ready waits between retries
RETRY_BUDGET: Final = 16  # retries (header reads or reopens) of files not ready per request
MAX_TOTAL: Final = 1 << 30  # bytes of all served files together (--max-total)
BUDGET: Final = 0.1  # seconds a request spends loading files before the rest waits
PID_SLACK: Final = 2.0  # seconds a writer may seem to start after its file (clock grain)


@dataclass(slots=True)
class Writer:
    """The process of a PROCESS file: ``pid``, its pidfd (-1 when psutil watches it) and
    the psutil process."""

    pid: int
    fd: int = -1
    process: psutil.Process | None = None

    def close(self) -> None:
        fd, self.fd = self.fd, -1
        if fd >= 0:
            os.close(fd)


@dataclass(slots=True)
class FileState:
    """What the agent knows of one directory entry: ``state`` (see the module constants),
    ``problems`` (one line each, newest last), the served ``entry`` (or None), the stat
    ``key`` it was last looked at with, and a stable ``instance`` id for the status indom."""

    name: str
    instance: int
    state: str = ""
    problems: list[str] = field(default_factory=list)
    error: MmvError | None = None  # the reader's refusal (or not-ready), for check's fields
    entry: FileEntry | None = None
    key: tuple[int, ...] | None = (-1,)
    writer: Writer | None = None  # of the served entry, when it is a PROCESS file
    log_after: float = 0.0  # while not ready: when its problem is worth a log line
    delay: float = 0.0  # while not ready: seconds until the next retry
    retry: int = 0  # while not ready: the sequence number of its pending retry
    peek: int = -1  # while not ready: a descriptor to read its header through
    peek_inode: tuple[int, int] = (0, 0)
    head: bytes | None = None  # while not ready: its header when it was last opened

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
        pidfd: bool = True,
        budget: float | None = BUDGET,
        max_total: int = MAX_TOTAL,
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
        self.budget = budget
        self.max_total = max_total
        self._total = 0  # bytes of the served files
        self._loading = 0  # bytes of the files one _consider opened, not served yet
        self._released = 0  # files unserved so far (a refusal for max_total may now pass)
        self._queue: dict[str, None] = {}  # names to (re)load, in order (budget)
        self._asked: dict[int, int] = {}  # header cluster -> served files asking for it
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
        self._waiting: dict[float, deque[tuple[float, int, str]]] = {}  # delay -> retries
        self._retry_number = 0
        self._peeks = 0  # descriptors held for files not ready (FileState.peek)
        self._max_peeks = resource.getrlimit(resource.RLIMIT_NOFILE)[0] // 4
        self.retries = 0  # retries of files not ready so far (header reads or reopens)
        self._starved: set[str] = set()  # refused or partial for want of a resource
        self._freed = 0  # catalogue.freed when the starved files were last retried
        self._pidfd = pidfd and hasattr(os, "pidfd_open")
        self._epoll: select.epoll | None = None
        self._writers: dict[int, str] = {}  # pidfd -> name of the file it watches
        self._dirty_lock = threading.Lock()

    # -- queries

    @property
    def pending(self) -> bool:
        """True while a rescan is pending: a file is not ready, or a reload was requested
        (what ``mmv.control.reload`` reports)."""
        return self.reload_requested or bool(self._not_ready) or bool(self._queue)

    @property
    def queued(self) -> int:
        """Names waiting for a later request's budget to be loaded."""
        return len(self._queue)

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

    def refresh(self, force: bool = False, bounded: bool | None = None) -> Changes:
        """Bring the catalogue up to date with the directory (within the budget when
        ``bounded``, by default unless ``force``); returns what changed."""
        changes = self._exited()
        dirty = self._take_dirty()
        now = self.clock()
        bounded = not force if bounded is None else bounded
        # loading and validating take half the budget: cataloguing and the tables the rest
        deadline = now + self.budget / 2 if bounded and self.budget is not None else None
        for name in dirty & self._not_ready:  # an event for a file that waits: at once
            self._schedule(self.states[name], 0.0, now)
        retry = set(self._not_ready) if force else self._due(now)
        for name in retry:
            self.states[name].key = UNSEEN
        if force or self.reload_requested or ALL in dirty or self._directory_changed():
            self.reload_requested = False
            changes.extend(self._rescan())
        else:
            changes.extend(self._enqueue(sorted((dirty - self._not_ready) | retry)))
        if force or now - self._last_check >= self.check_interval:
            self._last_check = now
            changes.extend(self._check_served(None if force else CHECK_BUDGET))
        changes.extend(self._drain(deadline))
        freed = self.catalogue.freed + self._released
        if self._starved and freed != self._freed:
            changes.extend(self._retry_starved())
        self._freed = self.catalogue.freed + self._released
        return changes

    def _enqueue(self, names: Iterable[str]) -> Changes:
        """Queue ``names`` for loading (after those already queued); a name not seen
        before is PENDING until it is reached."""
        changes = Changes()
        for name in names:
            if name in self._queue:
                continue
            self._queue[name] = None
            if name not in self.states:
                self.states[name] = FileState(name, self._instance(name), state=PENDING)
                changes.states = True
        return changes

    def _drain(self, deadline: float | None) -> Changes:
        """Load queued names in order until ``deadline`` (None: all of them)."""
        if not self._queue:
            return Changes()
        names, self._queue = list(self._queue), {}
        changes, rest = self._consider(names, deadline)
        if rest:
            self._queue = dict.fromkeys([*rest, *self._queue])
        return changes

    def _schedule(self, state: FileState, delay: float, when: float) -> None:
        """Retry ``state`` (not ready) at ``when``, in the queue of its ``delay``: files
        that have waited less go first."""
        self._retry_number += 1
        state.retry = self._retry_number
        self._waiting.setdefault(delay, deque()).append((when, self._retry_number, state.name))

    def _due(self, now: float) -> set[str]:
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
                    self._wait_more(state, now)
                else:
                    due.add(name)
        self.retries += tried
        return due

    def _wait_more(self, state: FileState, now: float) -> None:
        """``state`` is still not ready: back off, and log it once it stayed so."""
        state.delay = min(max(2 * state.delay, RETRY_FIRST), RETRY_MAX)
        self._schedule(state, state.delay, now + state.delay)
        if now >= state.log_after:
            state.log_after = float("inf")
            self.log(state.last_problem)

    def _peek(self, state: FileState, target: str, st: os.stat_result) -> bytes | None:
        """The header of a file that was not ready, read through a descriptor kept while it
        stays so (None when it cannot be opened)."""
        inode = (st.st_dev, st.st_ino)
        if state.peek >= 0 and state.peek_inode != inode:
            self._unpeek(state)
        if state.peek < 0:
            if self._peeks >= self._max_peeks:
                return None
            try:
                state.peek = os.open(target, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            except OSError:
                return None
            self._peeks += 1
            state.peek_inode = inode
        return _read_head(state.peek)

    def _unpeek(self, state: FileState) -> None:
        fd, state.peek, state.head = state.peek, -1, None
        if fd >= 0:
            os.close(fd)
            self._peeks -= 1

    def _retry_starved(self) -> Changes:
        """Files refused (or partly served) for want of a cluster or indom serial, again in
        name order, until one still lacks it."""
        changes = Changes()
        for name in sorted(self._starved):
            self.states[name].key = UNSEEN
            changes.extend(self._consider([name])[0])
            if name in self._starved:
                break
        return changes

    def reload(self, name: str) -> Changes:
        """Load ``name`` again now (its values read as changed)."""
        if name in self.states:
            self.states[name].key = UNSEEN
        self._queue.pop(name, None)
        return self._consider([name])[0]

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
            names = sorted(n for n in os.listdir(self.directory) if ignore_reason(n) is None)
            self._list_error = None
        except OSError as e:
            if e.strerror != self._list_error:  # once per new error, not per request
                self.log(f"{self.directory}: cannot list directory: {e.strerror}")
            self._list_error = e.strerror
            if e.errno not in (errno.ENOENT, errno.ENOTDIR):
                # out of descriptors or memory: what is served stays served, and the
                # listing is tried again at the next request
                self._dir_key = None
                return Changes()
            names = []
        changes = Changes()
        for gone in sorted(set(self.states) - set(names)):
            changes.extend(self._forget(gone))
        changes.extend(self._enqueue(names))
        return changes

    def _forget(self, name: str) -> Changes:
        state = self.states.pop(name)
        self._queue.pop(name, None)
        self._unpeek(state)
        self._not_ready.discard(name)
        self._starved.discard(name)
        changes = Changes(states=True)
        if state.entry is not None:
            changes.removed.append(self._unserve(state))
        return changes

    def _unserve(self, state: FileState) -> FileEntry:
        entry = self.catalogue.remove(state.name)
        assert entry is not None and entry is state.entry
        state.entry = None
        _count(self._asked, entry.mf.header.cluster, -1)
        self._total -= entry.mf.size
        self._released += 1
        entry.mf.close()
        if state.writer is not None:
            self._unwatch(state.writer)
            state.writer = None
        return entry

    def _consider(
        self, names: list[str], deadline: float | None = None
    ) -> tuple[Changes, list[str]]:
        """(Re)load the named entries whose stat changed and serve them in name order (names
        are first come, first served); auto-assigned clusters avoid every requested one.
        Past ``deadline`` (once one file was loaded) the names not reached are returned."""
        changes = Changes()
        opened: list[tuple[FileState, MmvFile, Writer | None]] = []
        rest: list[str] = []
        for i, name in enumerate(names):
            if deadline is not None and opened and self.clock() >= deadline:
                rest = names[i:]
                break
            if not os.path.lexists(os.path.join(self.directory, name)):
                if name in self.states:
                    changes.extend(self._forget(name))
                continue
            state = self.states.get(name)
            if state is None:
                state = self.states[name] = FileState(name, self._instance(name))
                changes.states = True
            loaded = self._load(state, changes)
            if loaded is not None:
                opened.append((state, *loaded))
                self._loading += loaded[0].size - (state.entry.mf.size if state.entry else 0)
        self._loading = 0
        requested = {c for c, n in self._asked.items() if n}
        requested |= {mf.header.cluster for _, mf, _ in opened}
        requested.discard(0)
        wanted = self.catalogue.wanted_indoms(mf for _, mf, _ in opened)
        for state, mf, writer in sorted(opened, key=lambda p: p[0].name):  # first name wins
            self._serve(state, mf, writer, (requested - {mf.header.cluster}, wanted), changes)
        return changes, rest

    def _instance(self, name: str) -> int:
        """The status instance id of ``name``: kept while remembered, never reused."""
        inst = self._instances.get(name)
        if inst is None:
            inst, self._next_instance = self._next_instance, self._next_instance + 1
            remember(self._instances, name, inst, self.states)
        return inst

    # -- one file

    def _load(self, state: FileState, changes: Changes) -> tuple[MmvFile, Writer | None] | None:
        """Open the entry if its stat changed (or its key was reset for a retry), with its
        live writer when it is a PROCESS file; None when unchanged, not ready, refused or
        its writer has exited (state and log updated)."""
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
        if key == state.key:
            return None
        state.key = key
        others = self._total + self._loading - (state.entry.mf.size if state.entry else 0)
        if st.st_size <= self.max_size and others + st.st_size > self.max_total:
            why = (
                f"{path}: file size {st.st_size}: the served files would hold more than "
                f"{self.max_total} bytes (--max-total), file not served"
            )
            self._set(state, REFUSED, why, changes)
            self._starved.add(state.name)  # retried when a file leaves
            return None
        try:
            mf = MmvFile.open(target, max_size=self.max_size, name=state.name)
        except NotReady as e:
            self._set(state, NOT_READY, str(e), changes)
            state.error = e
            head = self._peek(state, target, st)
            # kept only when it is itself not ready: it may be newer than what open() saw
            state.head = head if head is not None and _waits(target, head) else None
            return None
        except MmvError as e:
            self._set(state, REFUSED, str(e), changes)
            state.error = e
            return None
        try:
            writer = self._writer(mf)
        except _Exited:
            mf.close()
            self._set(state, EXITED, self._exit_reason(path, mf), changes)
            return None
        return mf, writer

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

    def _serve(
        self,
        state: FileState,
        mf: MmvFile,
        writer: Writer | None,
        wants: tuple[set[int], set[int]],
        changes: Changes,
    ) -> None:
        """Serve a loaded file; ``wants``: the clusters and indom numbers other files of
        this scan ask for (Catalogue.add)."""
        if state.entry is not None:
            changes.removed.append(self._unserve(state))
        entry = self.catalogue.add(mf, *wants)
        if entry is None:
            mf.close()
            if writer is not None:
                writer.close()
            self._set(state, REFUSED, self.catalogue.refusal, changes, logged=True)
            if self.catalogue.starved:
                self._starved.add(state.name)
            return
        if not entry.metrics and any(t.type == fmt.TOC_METRICS and t.count for t in mf.toc):
            # none of its metrics is served: refused, its last problem the reason (logged)
            self.catalogue.remove(state.name)
            mf.close()
            if writer is not None:
                writer.close()
            for problem in mf.problems:
                self.log(str(problem))  # the catalogue logged its own (entry.problems)
            problems = [printable(p) for p in _problems(mf, entry)]
            problems = problems or [f"{mf.path}: metrics: no metric entry served"]
            self._set(state, REFUSED, problems[-1], changes, logged=True)
            state.problems = problems
            if entry.starved:
                self._starved.add(state.name)
            return
        state.entry = entry
        state.error = None
        _count(self._asked, mf.header.cluster, 1)
        self._total += mf.size
        if writer is not None:
            self._watch(state, writer)
        if entry.starved:
            self._starved.add(state.name)
        else:
            self._starved.discard(state.name)
        for problem in mf.problems:
            self.log(str(problem))  # the catalogue logged its own (entry.problems)
        problems = _problems(mf, entry)
        status = PARTIAL if problems else OK
        state.problems = [printable(p) for p in problems]
        state.state = status
        self._not_ready.discard(state.name)
        self._unpeek(state)
        changes.added.append(entry)
        changes.states = True

    def _set(
        self, state: FileState, new: str, problem: str, changes: Changes, logged: bool = False
    ) -> None:
        problem = printable(problem)
        state.error = None
        if state.entry is not None:
            changes.removed.append(self._unserve(state))
        changed = state.state != new or state.last_problem != problem
        self._starved.discard(state.name)
        if new == NOT_READY:  # logged only if it stays so: writers pass through it
            now = self.clock()
            state.problems = [problem]
            if state.state != NOT_READY:  # retried at the next request, then backoff
                state.log_after = now + self.not_ready_grace
                state.delay = 0.0
                self._schedule(state, 0.0, now)
            else:
                self._wait_more(state, now)
            self._not_ready.add(state.name)
        else:
            if changed and not logged:
                self.log(problem)
            self._not_ready.discard(state.name)
            self._unpeek(state)
        if changed:
            changes.states = True
        state.state = new
        state.problems = [problem]

    # -- served files: generation and writer

    def _check_served(self, budget: int | None) -> Changes:
        """Check the generation (and the writer, when no pidfd watches it) of served files:
        all of them, or ``budget`` of them, continuing where the last check stopped."""
        changes = Changes()
        stale: list[str] = []
        served = [(n, self.states[n], e) for n, e in self.catalogue.files.items()]
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
            writer = state.writer
            if writer is not None and writer.fd < 0 and not _running(writer):
                self._set(state, EXITED, self._exit_reason(entry.mf.path, entry.mf), changes)
        for name in stale:  # reloaded within the budget, this request or the next ones
            self.states[name].key = UNSEEN
        changes.extend(self._enqueue(stale))
        return changes

    def _writer(self, mf: MmvFile) -> Writer | None:
        """The live writer of a PROCESS file (None for other files and pid 0, as the C
        agent); raises _Exited when it has exited or its pid belongs to a process that
        started after the file was created."""
        pid = mf.header.process
        if not mf.header.process_flag or pid == 0:
            return None
        import psutil

        writer = Writer(pid)
        try:
            if self._pidfd:
                writer.fd = self._pidfd_open(pid)
            writer.process = psutil.Process(pid)
            created = fmt.generation_time(mf.header.g1, time.time())
            if created is not None and writer.process.create_time() > created + PID_SLACK:
                raise _Exited
            if writer.fd >= 0 and _readable(writer.fd):
                raise _Exited  # it exited after the pidfd was opened
        except (_Exited, psutil.Error, OSError, ValueError):
            writer.close()
            raise _Exited from None
        return writer

    def _pidfd_open(self, pid: int) -> int:
        """A pidfd of ``pid``, or -1 when this one cannot have one (psutil watches it);
        ProcessLookupError when there is no such process."""
        try:
            return os.pidfd_open(pid)
        except ProcessLookupError:
            raise
        except OSError as e:
            if e.errno in (errno.ENOSYS, errno.EPERM):  # no pidfds here (old kernel, seccomp)
                self._pidfd = False
            return -1

    def _watch(self, state: FileState, writer: Writer) -> None:
        state.writer = writer
        if writer.fd >= 0:
            if self._epoll is None:
                self._epoll = select.epoll()
            self._epoll.register(writer.fd, select.EPOLLIN)
            self._writers[writer.fd] = state.name

    def _unwatch(self, writer: Writer) -> None:
        if writer.fd >= 0 and self._epoll is not None:
            self._epoll.unregister(writer.fd)
            del self._writers[writer.fd]
        writer.close()

    def _exited(self) -> Changes:
        """Served files whose writer exited since the last request: one epoll_wait."""
        changes = Changes()
        if not self._writers or self._epoll is None:
            return changes
        for fd, _ in self._epoll.poll(0):
            state = self.states[self._writers[fd]]
            assert state.entry is not None
            self._set(
                state, EXITED, self._exit_reason(state.entry.mf.path, state.entry.mf), changes
            )
        return changes

    @staticmethod
    def _exit_reason(path: str, mf: MmvFile) -> str:
        return (
            f"{path}: {fmt.header_field('process')}: writer process {mf.header.process} "
            "has exited (MMV_FLAG_PROCESS), file not served"
        )


class _Exited(Exception):
    """The writer of a PROCESS file has exited."""


class _Skip(Exception):
    """A directory entry that is not read; ``key`` identifies it until it changes."""

    def __init__(self, why: str, key: tuple[int, ...] | None) -> None:
        super().__init__(why)
        self.key = key


def _problems(mf: MmvFile, entry: FileEntry) -> list[str]:
    """What was skipped of a served file, one line each: the reader's, then the
    catalogue's."""
    return [str(p) for p in mf.problems] + [f"{mf.path}: {p}" for p in entry.problems]


def _count(table: dict[int, int], key: int, step: int) -> None:
    n = table.get(key, 0) + step
    if n:
        table[key] = n
    else:
        table.pop(key, None)


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


def _waits(path: str, head: bytes) -> bool:
    """Whether a file whose first bytes are ``head`` is not ready (parse.header.read_header)."""
    if not head:
        return True  # empty
    if len(head) < fmt.HEADER_SIZE:
        return False
    try:
        read_header(path, head, fmt.HEADER_SIZE)
    except NotReady:
        return True
    except MmvError:
        return False
    return False


def _read_head(fd: int) -> bytes | None:
    """A file's first HEADER_SIZE bytes (fewer when it is shorter); None when unreadable."""
    try:
        return os.pread(fd, fmt.HEADER_SIZE, 0)
    except OSError:
        return None


def _readable(fd: int) -> bool:
    """Whether a pidfd says its process has exited (poll: select cannot take fds >= 1024)."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(0))


def _running(writer: Writer) -> bool:
    """psutil's answer, for a writer no pidfd watches."""
    import psutil

    try:
        return writer.process is not None and writer.process.is_running()
    except psutil.Error:
        return False
