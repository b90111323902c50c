"""Loading and serving the entries of one MMV directory, one by one, without PCP.

:class:`Loader` holds every directory entry's :class:`~.filestate.FileState` and the
:class:`~.catalogue.Catalogue` of served files.  :meth:`Loader.consider` looks at a list of
names: each whose stat changed is resolved (:mod:`~.dirpolicy`), checked against the
resources (``max_total``, hard links), opened and validated (:class:`~.reader.MmvFile`), its
PROCESS writer found (:mod:`~.liveness`); then the opened files are served in name order
(first come, first served).  When it runs, and how much at a time, is :mod:`~.scanner`'s
part.

Hard links: a regular entry whose inode is served (or opened by the same scan) under
another name is refused, naming it, and looked at again when that name goes.  The C agent
maps every name, so N links to one big file cost it N loads and N copies per fetch; a
symlink to a file beside it is still served under its own name.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterable
from typing import Final

from pmda_mmv.directory import fdlimit
from pmda_mmv.directory.backoff import Backoff
from pmda_mmv.directory.filestate import (
    EXITED,
    NO_WRITER,
    NOT_READY,
    OK,
    PARTIAL,
    PENDING,
    REFUSED,
    UNSEEN,
    Changes,
    FileState,
)
from pmda_mmv.directory.liveness import NoWriter, Searching, Writer, Writers, reason_line
from pmda_mmv.directory.policy import Skip, resolve
from pmda_mmv.mmvfile import layout
from pmda_mmv.mmvfile.errors import MmvError, NotReady
from pmda_mmv.mmvfile.reader import MmvFile
from pmda_mmv.mmvfile.rules import printable, with_labels
from pmda_mmv.namespace.catalogue import Catalogue, used_indoms
from pmda_mmv.namespace.served import FileEntry, Log, remember

Inode = tuple[int, int]
Opened = tuple[FileState, MmvFile, Writer | None, Inode | None]
"""A file one consider opened: its state, reader, live writer and inode."""

LOAD_RATE: Final = 100e6
"""Bytes a second a load is assumed to take before one was measured (about 200 MB/s for
files of 1M values on the 2-core test machine)."""


class Loader:
    """The entries of ``directory`` and the files served from it; see the module
    docstring (the scanner's options, with the same names)."""

    def __init__(
        self,
        directory: str,
        catalogue: Catalogue,
        *,
        max_size: int,
        owners: Iterable[int] | None,
        not_ready_grace: float,
        log: Log | None,
        clock: Callable[[], float],
        pidfd: bool,
        max_total: int,
        info: Log | None = None,
    ) -> None:
        self.directory = directory
        self._prefix = os.path.join(directory, "")
        self.catalogue = catalogue
        self.max_size = max_size
        self.owners = set(owners) if owners is not None else None
        self.not_ready_grace = not_ready_grace
        sink: Log = log or (lambda line: None)
        self.log: Log = lambda line: sink(printable(line))
        benign: Log = info or sink
        self.info: Log = lambda line: benign(printable(line))  # benign events (LOG_INFO)
        self.clock = clock
        self.states: dict[str, FileState] = {}
        self.max_total = max_total
        self.max_files = fdlimit.max_files()  # descriptors of served files and pidfds
        self.max_names = 1 << 62  # metric names of the served files (the scanner's option)
        self.max_indoms = 1 << 62  # served indoms of the served files (the scanner's option)
        self.max_instances = 1 << 62  # their instances (the scanner's option)
        self._names = 0  # metric entries of the served files
        self._indoms = 0  # served indoms of the served files
        self._insts = 0  # their instances
        self._opening = 0  # files one consider opened that were not served before
        self._total = 0  # bytes of the served files
        self._loading = 0  # bytes of the files one consider opened, not served yet
        self.released = 0  # files unserved so far (a refusal for max_total may now pass)
        self.queue: dict[str, None] = {}  # names to (re)load, in order (budget)
        self._asked: dict[int, int] = {}  # header cluster -> served files asking for it
        self._inodes: dict[Inode, str] = {}  # served inode -> its name (not via symlinks)
        self._links: dict[Inode, set[str]] = {}  # inode -> names refused as its hard links
        self._instances: dict[str, int] = {}  # name -> status instance id (catalogue.remember)
        self._next_instance = 0
        self.not_ready: set[str] = set()  # names whose state is NOT_READY
        self.backoff = Backoff(self.states, self.info)  # "not ready yet" is benign
        self.starved: set[str] = set()  # refused or partial for want of a resource
        self.writers = Writers(pidfd, clock=clock)
        self.closing: list[MmvFile] = []  # unserved files whose descriptors are still open
        # containers/<name> -> its directory and labels (containers.py; names with a "/")
        self.scopes: dict[str, tuple[str, dict[str, str]]] = {}
        self.load_rate = LOAD_RATE  # bytes a second loads take here (measured: consider)
        self.skip_bytes: int | None = None  # consider leaves files this big for later
        self.skipped: list[str] = []  # the names consider left for later (skip_bytes)

    def _path(self, name: str) -> str:
        """The path of entry ``name``: in the directory, or in a container's."""
        scope, _, base = name.rpartition("/")
        if not scope:
            return self._prefix + name
        return f"{self.scopes.get(scope, ('/nonexistent', {}))[0]}/{base}"

    def forget(self, name: str) -> Changes:
        state = self.states.pop(name)
        self.queue.pop(name, None)
        self.backoff.unpeek(state)
        self.not_ready.discard(name)
        self.starved.discard(name)
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
        self._names -= len(entry.metrics)
        self._indoms -= len(entry.indoms)
        self._insts -= _instance_count(entry)
        self.released += 1
        self.closing.append(entry.mf)  # unserved now, its descriptor closed by the scanner
        if state.writer is not None:
            self.writers.unwatch(state.writer)
            state.writer = None
        if state.inode is not None:
            self._inodes.pop(state.inode, None)
            self._requeue_links(state.inode)
            state.inode = None
        return entry

    def _requeue_links(self, inode: Inode | None) -> None:
        """The names refused as hard links of ``inode``, looked at again: the name they
        lost to is no longer served (one of them may be)."""
        if inode is None:
            return
        for link in sorted(self._links.pop(inode, ())):
            if link in self.states:
                self.states[link].key = UNSEEN
                self.queue[link] = None

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
                if name in self.states:
                    changes.extend(self.forget(name))
                continue
            except OSError as e:
                lst = e  # reported by _load, as a refusal
            state = self.states.get(name)
            if state is None:
                state = self.states[name] = FileState(name, self.instance(name))
                changes.states = True
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
                self._loading += loaded[0].size - (state.entry.mf.size if state.entry else 0)
                self._opening += state.entry is None
        self._loading = self._opening = 0
        self._serve_opened(opened, changes)
        return changes, stop

    def _serve_opened(self, opened: list[Opened], changes: Changes) -> None:
        """Serve the files one consider opened, in name order (first come, first served);
        auto-assigned clusters avoid every cluster asked for."""
        requested = {c for c, n in self._asked.items() if n}
        requested |= {mf.header.cluster for _, mf, _, _ in opened}
        requested.discard(0)
        wanted = self.catalogue.wanted_indoms(mf for _, mf, _, _ in opened)
        for state, mf, writer, inode in sorted(opened, key=lambda p: p[0].name):  # first wins
            wants = (requested - {mf.header.cluster}, wanted)
            self._serve(state, mf, (writer, inode), wants, changes)

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
        return self.skip_bytes <= size <= self.max_size and key != state.key

    def _measure(self, size: int, seconds: float) -> None:
        """Learn the load rate from a load of ``size`` bytes (files of 64 KiB or more)."""
        if size >= 1 << 16 and seconds > 0:
            self.load_rate = 0.7 * self.load_rate + 0.3 * (size / seconds)

    def instance(self, name: str) -> int:
        """The status instance id of ``name``: kept while remembered, never reused."""
        inst = self._instances.get(name)
        if inst is None:
            inst, self._next_instance = self._next_instance, self._next_instance + 1
            remember(self._instances, name, inst, self.states)
        return inst

    # -- one file

    def _unexpected(self, state: FileState, path: str, error: Exception, changes: Changes) -> None:
        """An unexpected exception loading ``state`` (a defect, or an environment the agent
        did not foresee) is this file's problem: refused with the exception named, looked
        at again when its stat changes; the other files of the scan are still served."""
        why = f"{path}: unexpected error while loading ({type(error).__name__}: {error})"
        self.set_state(state, REFUSED, why + ", not served", changes)
        state.error = None

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
        if inode is not None and self._linked(state, path, inode, loading, changes):
            return None
        if self._over_total(state, path, st, changes) or self._over_files(state, path, changes):
            return None
        try:
            mf = MmvFile.open(target, max_size=self.max_size, name=state.name)
        except NotReady as e:
            self.set_state(state, NOT_READY, str(e), changes)
            state.error = e
            self.backoff.keep_head(state, target, st)
            return None
        except MmvError as e:
            self.set_state(state, REFUSED, str(e), changes)
            state.error = e
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
                raise Skip(f"cannot stat: {lst.strerror}", None)
            follow = "/" not in state.name  # a container's: no symlink (containers.py)
            return resolve(self.directory, path, lst, self.owners, follow)
        except Skip as skip:
            if skip.key is not None and skip.key == state.key:
                return None
            state.key = skip.key
            self.set_state(state, REFUSED, f"{path}: {skip}", changes)
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
            return (self.writers.open(mf, deadline),)
        except Searching:  # the walk of /proc goes on at the next request
            mf.close()
            state.key = UNSEEN
            self.queue[state.name] = None
            if state.entry is None and state.state != PENDING:
                state.state, state.problems = PENDING, []
                changes.states = True
            return None
        except NoWriter as e:
            mf.close()
            why = reason_line(path, e.reason)
            self.set_state(state, EXITED if e.exited else NO_WRITER, why, changes)
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

    def _linked(
        self,
        state: FileState,
        path: str,
        inode: Inode,
        loading: dict[Inode, str],
        changes: Changes,
    ) -> bool:
        """Refuse ``state`` when its inode is served, or loaded by this scan, under
        another name (a hard link); it is looked at again when that name goes."""
        holder = self._inodes.get(inode) or loading.get(inode)
        if holder is None or holder == state.name:
            return False
        why = f"{path}: file: same file as {holder} (hard link), file not served"
        self.set_state(state, REFUSED, why, changes)
        self._links.setdefault(inode, set()).add(state.name)
        return True

    def _over_total(
        self, state: FileState, path: str, st: os.stat_result, changes: Changes
    ) -> bool:
        """Refuse ``state`` when serving it would take the served files past max_total
        (retried when a file leaves)."""
        others = self._total + self._loading - (state.entry.mf.size if state.entry else 0)
        if st.st_size > self.max_size or others + st.st_size <= self.max_total:
            return False
        why = (
            f"{path}: file size {st.st_size}: the served files would hold more than "
            f"{self.max_total} bytes (--max-total), file not served"
        )
        self.set_state(state, REFUSED, why, changes)
        self.starved.add(state.name)  # retried when a file leaves
        return True

    def _over_files(self, state: FileState, path: str, changes: Changes) -> bool:
        """Refuse ``state`` when serving it (its descriptor and maybe a pidfd) would take
        the served files' descriptors past max_files (fdlimit.py), retried when a file
        leaves."""
        served = len(self.catalogue.files)
        used = served + self.writers.watched + 2 * self._opening  # a file and its pidfd
        if state.entry is not None or used + 2 <= self.max_files:
            return False
        why = (
            f"{path}: file: {served} files served, the most the descriptor limit "
            "allows (RLIMIT_NOFILE), file not served"
        )
        self.set_state(state, REFUSED, why, changes)
        self.starved.add(state.name)  # retried when a file leaves
        return True

    def _serve(
        self,
        state: FileState,
        mf: MmvFile,
        found: tuple[Writer | None, Inode | None],
        wants: tuple[set[int], set[int]],
        changes: Changes,
    ) -> None:
        """Serve a loaded file; ``found``: its live writer and its inode (None through a
        symlink); ``wants``: the clusters and indom numbers other files of this scan ask
        for (Catalogue.add)."""
        writer, inode = found
        if state.entry is not None:
            changes.removed.append(self._unserve(state))
        why = self._over_counts(mf)
        if why is not None:
            _close(mf, writer)
            self._requeue_links(inode)
            self.set_state(state, REFUSED, why, changes)
            self.starved.add(state.name)  # retried when a file leaves
            return
        entry = self.catalogue.add(mf, *wants)
        if entry is None:
            _close(mf, writer)
            self._requeue_links(inode)
            self.set_state(state, REFUSED, self.catalogue.refusal, changes, logged=True)
            if self.catalogue.starved:
                self.starved.add(state.name)
            return
        if not entry.metrics and any(t.type == layout.TOC_METRICS and t.count for t in mf.toc):
            self._refuse_unserved(state, entry, writer, changes)
            self._requeue_links(inode)
            return
        self._served(state, entry, found, changes)

    def _served(
        self,
        state: FileState,
        entry: FileEntry,
        found: tuple[Writer | None, Inode | None],
        changes: Changes,
    ) -> None:
        """``state``'s file is served as ``entry`` (its writer and inode ``found``): the
        loader's counts, the writer watched, its problems logged and kept."""
        mf, (writer, inode) = entry.mf, found
        state.entry = entry
        state.error = None
        _count(self._asked, mf.header.cluster, 1)
        self._total += mf.size
        self._names += len(entry.metrics)
        self._indoms += len(entry.indoms)
        self._insts += _instance_count(entry)
        if inode is not None:  # not through a symlink
            state.inode = inode
            self._inodes[inode] = state.name
        labels = self.scopes.get(state.name.rpartition("/")[0], ("", {}))[1]
        if writer is not None:
            state.writer = writer
            self.writers.watch(state.name, writer)
            labels = {**writer.labels(), **labels}
        _attribute(entry, labels)
        if entry.starved:
            self.starved.add(state.name)
        else:
            self.starved.discard(state.name)
        for problem in mf.problems:
            self.log(str(problem))  # the catalogue logged its own (entry.problems)
        problems = _problems(mf, entry)
        state.problems = [printable(p) for p in problems]
        state.state = PARTIAL if problems else OK
        self.not_ready.discard(state.name)
        self.backoff.unpeek(state)
        changes.added.append(entry)
        changes.states = True

    def _over_counts(self, mf: MmvFile) -> str | None:
        """Why serving ``mf`` would take the served files past ``--max-names``,
        ``--max-indoms`` or ``--max-instances`` (None: it fits).  Indoms no metric uses
        are not served and do not count."""
        used = [mf.indoms[s] for s in used_indoms(mf)]
        instances = sum(len(d.instances) for d in used)
        for what, n, unit, have, most in (
            ("metrics", len(mf.metrics), "names", self._names, self.max_names),
            ("indoms", len(used), "indoms", self._indoms, self.max_indoms),
            ("indoms", instances, "instances", self._insts, self.max_instances),
        ):
            if have + n > most:
                return (
                    f"{mf.path}: {what}: {n} {unit}: the served files would have more "
                    f"than {most} (--max-{unit}), file not served"
                )
        return None

    def _refuse_unserved(
        self, state: FileState, entry: FileEntry, writer: Writer | None, changes: Changes
    ) -> None:
        """None of the file's metrics is served: refused, its last problem the reason."""
        mf = entry.mf
        self.catalogue.remove(state.name)
        _close(mf, writer)
        for problem in mf.problems:
            self.log(str(problem))  # the catalogue logged its own (entry.problems)
        problems = [printable(p) for p in _problems(mf, entry)]
        problems = problems or [f"{mf.path}: metrics: no metric entry served"]
        self.set_state(state, REFUSED, problems[-1], changes, logged=True)
        state.problems = problems
        if entry.starved:
            self.starved.add(state.name)

    def set_state(
        self, state: FileState, new: str, problem: str, changes: Changes, logged: bool = False
    ) -> None:
        problem = printable(problem)
        state.error = None
        if state.entry is not None:
            changes.removed.append(self._unserve(state))
        changed = state.state != new or state.last_problem != problem
        self.starved.discard(state.name)
        if new == NOT_READY:  # logged only if it stays so: writers pass through it
            now = self.clock()
            state.problems = [problem]
            if state.state != NOT_READY:  # retried at the next request, then backoff
                state.log_after = now + self.not_ready_grace
                state.delay = 0.0
                self.backoff.schedule(state, 0.0, now)
            else:
                self.backoff.wait_more(state, now)
            self.not_ready.add(state.name)
        else:
            if changed and not logged:
                (self.info if new == EXITED else self.log)(problem)
            self.not_ready.discard(state.name)
            self.backoff.unpeek(state)
        if changed:
            changes.states = True
        state.state = new
        state.problems = [problem]


def _attribute(entry: FileEntry, labels: dict[str, str]) -> None:
    """The agent's labels of a container writer over the file's own, at every level a
    label set of the file could name them (a container cannot forge its attribution)."""
    if not labels:
        return
    entry.labels = with_labels(entry.labels, labels)
    names = [f'"{n}"' for n in labels]
    for sm in entry.metrics:
        if any(n in sm.labels for n in names):
            sm.labels = with_labels(sm.labels, labels)
    for si in entry.indoms.values():
        if any(n in si.labels for n in names):
            si.labels = with_labels(si.labels, labels)
        for inst, (lb, notes) in si.instance_labels.items():
            if any(n in lb for n in names):
                si.instance_labels[inst] = (with_labels(lb, labels), notes)


def _instance_count(entry: FileEntry) -> int:
    return sum(len(si.indom.instances) for si in entry.indoms.values())


def _close(mf: MmvFile, writer: Writer | None) -> None:
    mf.close()
    if writer is not None:
        writer.close()


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
