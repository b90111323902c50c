"""The entry table of one MMV directory, without PCP: every entry's state, the names queued
for loading, the files not ready, starved or closing, and the serving of the files opened.

:class:`EntryTable` is the only writer of that state: the scanner and the loader read it
through read-only views and change it through methods named for what they mean.  Every name
queued, not ready or starved has a state; a name is not ready while its state is NOT_READY.
:meth:`EntryTable.serve_opened` serves the files one scan of the :class:`~.loader.Loader`
opened, in name order (first come, first served), within the :class:`~.resources.Resources`
left; :meth:`EntryTable.set_state` moves an entry to a state, logging its problem once per
change (a not-ready one only once it stays so, :mod:`~.backoff`).  A resource freed (a file
unserved, a cluster or an indom serial the catalogue released) sets :attr:`EntryTable.freed`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import Final

from pmda_mmv.directory.backoff import Backoff
from pmda_mmv.directory.filestate import (
    EXITED,
    NOT_READY,
    OK,
    PARTIAL,
    PENDING,
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


class EntryTable:
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
        self._states: dict[str, FileState] = {}
        self._queue: dict[str, None] = {}  # names to (re)load, in order (budget)
        self._instances: dict[str, int] = {}  # name -> status instance id (catalogue.remember)
        self._next_instance = 0
        self._not_ready: set[str] = set()  # names whose state is NOT_READY
        self._backoff = Backoff(self._states, self.info)  # "not ready yet" is benign
        self._starved: set[str] = set()  # refused or partial for want of a resource
        self._freed = False  # a resource was freed since saw_freed
        catalogue.freed_listeners.append(self._on_freed)
        self.writers = Writers(pidfd, clock=clock)
        self._closing: list[MmvFile] = []  # unserved files whose descriptors are still open
        # containers/<name> -> its directory and labels (containers.py; names with a "/")
        self.scopes: dict[str, tuple[str, dict[str, str]]] = {}
        # read-only views (live) of the states, the names not ready and starved, the closing
        self.states: Final[Mapping[str, FileState]] = self._states
        self.not_ready: Final[AbstractSet[str]] = self._not_ready
        self.starved: Final[AbstractSet[str]] = self._starved
        self.closing: Final[Sequence[MmvFile]] = self._closing

    @property
    def queued(self) -> int:
        """How many names are queued for loading."""
        return len(self._queue)

    @property
    def pending(self) -> bool:
        """Whether a name is queued or not ready."""
        return bool(self._queue) or bool(self._not_ready)

    @property
    def retries(self) -> int:
        """Retries of files not ready so far (header reads or reopens)."""
        return self._backoff.retries

    @property
    def freed(self) -> bool:
        """Whether a file was unserved, or a cluster or indom serial freed, since saw_freed."""
        return self._freed

    # -- entries

    def instance(self, name: str) -> int:
        """The status instance id of ``name``: kept while remembered, never reused."""
        inst = self._instances.get(name)
        if inst is None:
            inst, self._next_instance = self._next_instance, self._next_instance + 1
            remember(self._instances, name, inst, self._states)
        return inst

    def state(self, name: str, changes: Changes) -> FileState:
        """The state of ``name``, a new one (UNSEEN) when it has none."""
        state = self._states.get(name)
        if state is None:
            state = self._states[name] = FileState(name, self.instance(name))
            changes.states = True
        return state

    def forget(self, name: str) -> Changes:
        """The entry ``name`` is gone: its state dropped, its file unserved."""
        state = self._states.pop(name)
        self._queue.pop(name, None)
        self._backoff.unpeek(state)
        self._not_ready.discard(name)
        self._starved.discard(name)
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
        self._freed = True  # a refusal for max_total may now pass
        self._closing.append(entry.mf)  # unserved now, its descriptor closed later
        if state.writer is not None:
            self.writers.unwatch(state.writer)
            state.writer = None
        return entry

    def _on_freed(self) -> None:  # the catalogue released a cluster or an indom serial
        self._freed = True

    def saw_freed(self) -> None:
        """The frees so far are acted upon: :attr:`freed` is False until the next one."""
        self._freed = False

    # -- the queue

    def enqueue(self, names: Iterable[str]) -> Changes:
        """Queue ``names`` for loading (after those already queued; one queued already
        keeps its place); a name not seen before is PENDING until it is reached."""
        changes = Changes()
        for name in names:
            if name in self._queue:
                continue
            self._queue[name] = None
            if name not in self._states:
                self._states[name] = FileState(name, self.instance(name), state=PENDING)
                changes.states = True
        return changes

    def relist(self, names: list[str]) -> Changes:
        """Queue a listing's ``names``: the new ones first (a new file is served at the
        next request however many are known), then what was queued, then the rest."""
        queue, self._queue = self._queue, {}
        changes = self.enqueue([n for n in names if n not in self._states])
        self._queue.update(queue)
        self._queue.update(dict.fromkeys(names))
        return changes

    def invalidate(self, names: Iterable[str]) -> None:
        """Look at ``names`` again at their next load, whatever their stat."""
        for name in names:
            if name in self._states:
                self._states[name].key = UNSEEN

    def requeue(self, names: Iterable[str]) -> None:
        """Look at ``names`` again, queued (refused as hard links of a file no longer served,
        not served after all, or of a new generation: one of them may be served now)."""
        for name in names:
            if name in self._states:
                self._states[name].key = UNSEEN
                self._queue[name] = None

    def take(self, name: str) -> None:
        """``name`` is loaded now, out of its turn: looked at again, not queued any more."""
        self.invalidate([name])
        self._queue.pop(name, None)

    def take_queue(self) -> dict[str, None]:
        """The queued names, in order, the queue left empty (until :meth:`put_back`)."""
        queue, self._queue = self._queue, {}
        return queue

    def put_back(self, rest: dict[str, None]) -> None:
        """Queue ``rest`` (what :meth:`take_queue` took, not reached) first again, in order;
        a name queued meanwhile keeps its place in ``rest``, the others go after."""
        rest.update(self._queue)
        self._queue = rest

    def await_writer(self, state: FileState, changes: Changes) -> None:
        """``state``'s writer is searched at the next request: queued, PENDING unless served."""
        self.requeue([state.name])
        if state.entry is None and state.state != PENDING:
            state.state, state.problems = PENDING, []
            self._not_ready.discard(state.name)
            self._backoff.unpeek(state)
            changes.states = True

    def due(self, dirty: AbstractSet[str], now: float, force: bool) -> set[str]:
        """The names not ready to retry now (looked at again at their next load): those
        ``dirty`` names at once, the others as their backoff says (all when ``force``)."""
        for name in dirty & self._not_ready:  # an event for a file that waits: at once
            self._backoff.schedule(self._states[name], 0.0, now)
        retry = set(self._not_ready) if force else self._backoff.due(now)
        self.invalidate(retry)
        return retry

    def keep_head(self, state: FileState, target: str, st: os.stat_result) -> None:
        """``state`` was found not ready: its header kept for the retries (:mod:`~.backoff`)."""
        self._backoff.keep_head(state, target, st)

    def close_unserved(self, deadline: float | None, at_least: int) -> None:
        """Close unserved files: ``at_least`` of them, then more until ``deadline`` (None: all)."""
        closing, done = self._closing, 0
        for done, mf in enumerate(closing, 1):
            mf.close()
            if deadline is not None and done >= at_least and self.clock() >= deadline:
                break
        del closing[:done]

    # -- serving

    def serve_opened(self, opened: list[Opened], changes: Changes) -> None:
        """Serve the files one scan opened, in name order (first come, first served);
        auto-assigned clusters avoid every cluster asked for."""
        requested = self.resources.requested()
        requested |= {mf.header.cluster for _, mf, _, _ in opened}
        requested.discard(0)
        wanted = wanted_indoms(mf for _, mf, _, _ in opened)
        wants = (requested, wanted)  # its own cluster in it too: a copy each cost 4,095^2
        for state, mf, writer, inode in sorted(opened, key=lambda p: p[0].name):  # first wins
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
            self.refuse_starved(state, why, changes)
            return
        entry = self.catalogue.add(mf, *wants)
        if entry is None:
            _close(mf, writer)
            self.requeue(self.resources.links(inode))
            refusal = self.catalogue.refusal
            assert refusal is not None
            self.set_state(state, REFUSED, refusal, changes, logged=True)
            if self.catalogue.starved:
                self._starved.add(state.name)
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
            self._starved.add(state.name)
        else:
            self._starved.discard(state.name)
        for problem in mf.problems:
            self.log(str(problem))  # the catalogue logged its own (entry.problems)
        state.problems = _problems(mf, entry)
        state.state = PARTIAL if state.problems else OK
        self._not_ready.discard(state.name)
        self._backoff.unpeek(state)
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
            self._starved.add(state.name)

    def refuse_starved(self, state: FileState, problem: Problem, changes: Changes) -> None:
        """Refuse ``state`` for want of a resource (``problem``): retried when one is freed."""
        self.set_state(state, REFUSED, problem, changes)
        self._starved.add(state.name)

    def set_state(
        self, state: FileState, new: str, problem: Problem, changes: Changes, logged: bool = False
    ) -> None:
        """Move ``state`` to ``new`` for ``problem`` (logged once per change, unless
        ``logged`` already; a not-ready one only once it stays so)."""
        if state.entry is not None:
            changes.removed.append(self._unserve(state))
        changed = state.state != new or state.last_problem != problem
        self._starved.discard(state.name)
        if new == NOT_READY:  # logged only if it stays so: writers pass through it
            state.problems = [problem]
            self._backoff.not_ready(state, self.clock(), self.not_ready_grace)
            self._not_ready.add(state.name)
        else:
            if changed and not logged:
                (self.info if new == EXITED else self.log)(str(problem))
            self._not_ready.discard(state.name)
            self._backoff.unpeek(state)
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
