"""The entries of one MMV directory: their states, the names queued for loading, and the
serving (or unserving) of the files the loader opened, without PCP.

:class:`Entries` holds every directory entry's :class:`~.filestate.FileState` and the
:class:`~.catalogue.Catalogue` of served files; :meth:`Entries.serve_opened` serves the
files one scan of the :class:`~.loader.Loader` opened, in name order (first come, first
served), within the :class:`~.resources.Resources` left; :meth:`Entries.set_state` moves an
entry to a state, logging its problem once per change (a not-ready one only once it stays
so, :mod:`~.backoff`).
"""

from __future__ import annotations

from collections.abc import Callable

from pmda_mmv.directory.backoff import Backoff
from pmda_mmv.directory.filestate import (
    EXITED,
    NOT_READY,
    OK,
    PARTIAL,
    REFUSED,
    UNSEEN,
    Changes,
    FileState,
)
from pmda_mmv.directory.liveness import Writer, Writers
from pmda_mmv.directory.resources import Inode, Resources
from pmda_mmv.mmvfile import layout
from pmda_mmv.mmvfile.errors import Problem
from pmda_mmv.mmvfile.pcpdefs import Log
from pmda_mmv.mmvfile.reader import MmvFile
from pmda_mmv.mmvfile.rules import printable, with_labels
from pmda_mmv.namespace.catalogue import Catalogue
from pmda_mmv.namespace.indomserial import wanted_indoms
from pmda_mmv.namespace.served import FileEntry, remember

Opened = tuple[FileState, MmvFile, Writer | None, Inode | None]
"""A file one scan opened: its state, reader, live writer and inode."""


class Entries:
    """The entries of one directory and the files served from them; see the module
    docstring.  ``log`` and ``info`` (benign events, LOG_INFO) get printable lines."""

    def __init__(
        self,
        catalogue: Catalogue,
        resources: Resources,
        *,
        not_ready_grace: float,
        log: Log | None,
        clock: Callable[[], float],
        pidfd: bool,
        info: Log | None = None,
    ) -> None:
        self.catalogue = catalogue
        self.resources = resources
        self.not_ready_grace = not_ready_grace
        sink: Log = log or (lambda line: None)
        self.log: Log = lambda line: sink(printable(line))
        benign: Log = info or sink
        self.info: Log = lambda line: benign(printable(line))
        self.clock = clock
        self.states: dict[str, FileState] = {}
        self.released = 0  # files unserved so far (a refusal for max_total may now pass)
        self.queue: dict[str, None] = {}  # names to (re)load, in order (budget)
        self._instances: dict[str, int] = {}  # name -> status instance id (catalogue.remember)
        self._next_instance = 0
        self.not_ready: set[str] = set()  # names whose state is NOT_READY
        self.backoff = Backoff(self.states, self.info)  # "not ready yet" is benign
        self.starved: set[str] = set()  # refused or partial for want of a resource
        self.writers = Writers(pidfd, clock=clock)
        self.closing: list[MmvFile] = []  # unserved files whose descriptors are still open
        # containers/<name> -> its directory and labels (containers.py; names with a "/")
        self.scopes: dict[str, tuple[str, dict[str, str]]] = {}

    def instance(self, name: str) -> int:
        """The status instance id of ``name``: kept while remembered, never reused."""
        inst = self._instances.get(name)
        if inst is None:
            inst, self._next_instance = self._next_instance, self._next_instance + 1
            remember(self._instances, name, inst, self.states)
        return inst

    def forget(self, name: str) -> Changes:
        state = self.states.pop(name)
        self.queue.pop(name, None)
        self.backoff.unpeek(state)
        self.not_ready.discard(name)
        self.starved.discard(name)
        self.resources.gone(name)
        changes = Changes(states=True)
        if state.entry is not None:
            changes.removed.append(self._unserve(state))
        return changes

    def _unserve(self, state: FileState) -> FileEntry:
        entry = self.catalogue.remove(state.name)
        assert entry is not None and entry is state.entry
        state.entry = None
        self.requeue(self.resources.remove(entry, state.inode))
        state.inode = None
        self.released += 1
        self.closing.append(entry.mf)  # unserved now, its descriptor closed by the scanner
        if state.writer is not None:
            self.writers.unwatch(state.writer)
            state.writer = None
        return entry

    def requeue(self, names: list[str]) -> None:
        """Look at ``names`` again (those refused as hard links of a file no longer
        served, or not served after all: one of them may be now)."""
        for link in names:
            if link in self.states:
                self.states[link].key = UNSEEN
                self.queue[link] = None

    def serve_opened(self, opened: list[Opened], changes: Changes) -> None:
        """Serve the files one scan opened, in name order (first come, first served);
        auto-assigned clusters avoid every cluster asked for."""
        requested = self.resources.requested()
        requested |= {mf.header.cluster for _, mf, _, _ in opened}
        requested.discard(0)
        wanted = wanted_indoms(mf for _, mf, _, _ in opened)
        for state, mf, writer, inode in sorted(opened, key=lambda p: p[0].name):  # first wins
            wants = (requested - {mf.header.cluster}, wanted)
            self._serve(state, mf, (writer, inode), wants, changes)

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
        why = self.resources.over_counts(mf)
        if why is not None:
            _close(mf, writer)
            self.requeue(self.resources.links(inode))
            self.set_state(state, REFUSED, why, changes)
            self.starved.add(state.name)  # retried when a file leaves
            return
        entry = self.catalogue.add(mf, *wants)
        if entry is None:
            _close(mf, writer)
            self.requeue(self.resources.links(inode))
            refusal = self.catalogue.refusal
            assert refusal is not None
            self.set_state(state, REFUSED, refusal, changes, logged=True)
            if self.catalogue.starved:
                self.starved.add(state.name)
            return
        if not entry.metrics and any(t.type == layout.TOC_METRICS and t.count for t in mf.toc):
            self._refuse_unserved(state, entry, writer, changes)
            self.requeue(self.resources.links(inode))
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
        resources counted, the writer watched, its problems logged and kept."""
        mf, (writer, inode) = entry.mf, found
        state.entry = entry
        self.resources.add(entry, state.name, inode)
        state.inode = inode  # None through a symlink
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
        state.problems = _problems(mf, entry)
        state.state = PARTIAL if state.problems else OK
        self.not_ready.discard(state.name)
        self.backoff.unpeek(state)
        changes.added.append(entry)
        changes.states = True

    def _refuse_unserved(
        self, state: FileState, entry: FileEntry, writer: Writer | None, changes: Changes
    ) -> None:
        """None of the file's metrics is served: refused, its last problem the reason."""
        mf = entry.mf
        self.catalogue.remove(state.name)
        _close(mf, writer)
        for problem in mf.problems:
            self.log(str(problem))  # the catalogue logged its own (entry.problems)
        problems = _problems(mf, entry) or [
            Problem(path=mf.path, field="metrics", message="no metric entry served")
        ]
        self.set_state(state, REFUSED, problems[-1], changes, logged=True)
        state.problems = problems
        if entry.starved:
            self.starved.add(state.name)

    def set_state(
        self, state: FileState, new: str, problem: Problem, changes: Changes, logged: bool = False
    ) -> None:
        """Move ``state`` to ``new`` for ``problem`` (logged once per change, unless
        ``logged`` already; a not-ready one only once it stays so)."""
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
                (self.info if new == EXITED else self.log)(str(problem))
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


def _close(mf: MmvFile, writer: Writer | None) -> None:
    mf.close()
    if writer is not None:
        writer.close()


def _problems(mf: MmvFile, entry: FileEntry) -> list[Problem]:
    """What was skipped of a served file: the reader's, then the catalogue's."""
    return [p.problem for p in mf.problems] + entry.problems
