"""Discovery and lifecycle of the files in one MMV directory, without PCP.

:class:`Scanner` keeps every directory entry's state (:mod:`~.filestate`) and the
:class:`~.catalogue.Catalogue` of served files (:mod:`~.loader`, :mod:`~.entrytable`) up to date,
incrementally: :meth:`Scanner.refresh` runs at the start of each request (as the C agent's
``mmv_reload_maybe`` does) and costs one ``stat`` of the directory and one ``epoll_wait``
when nothing changed.  It rescans the listing when the directory changed (mtime, or an
event queued by :mod:`~.watcher`), retries the files that are not ready as their backoff
says (:mod:`~.backoff`), notices writers' exits (:mod:`~.liveness`), and checks the
generation pair of served files at most every ``check_interval`` seconds.  Unchanged files
keep their descriptor, tables, cluster and PMIDs.

Budget: loading, validating and cataloguing stop once a request has spent ``budget``
seconds on them (``budget.BUDGET``; at least one entry is looked at per request, refused ones
included); the names not reached stay queued, in order, state PENDING, and the next
requests go on with them.  A listing queues the new names first (a new file is served at
the next request however many are known), then the known ones (one renamed over has a
new stat).  A forced refresh (the first scan of an agent pmcd started with
``pmda-mmv debug``) is not bounded; the first scan of the agent is, by ``budget.STARTUP_BUDGET``.
A reload a fetch finds (a served file given a new generation) loads at once only while
the request's budget lasts, else it is queued as any other.

Resources: a file refused, or an indom left out, for want of a cluster or an indom serial
is retried when the catalogue frees one (in name order, until one is still refused); a file
refused past ``max_total``, ``max_names``, ``max_indoms`` or ``max_instances`` when a
served file leaves.

Policies (:mod:`~.policy`): dot-files are ignored; only regular files are read; a symlink
is followed only to a regular file inside the same directory; ``owners``; files larger than
``max_size`` are refused; a hard link to a file served under another name is refused
(:mod:`~.resources`).  Every refusal is logged once per change of the file.
"""

from __future__ import annotations

import errno
import itertools
import os
import threading
import time
from collections.abc import Callable, Collection, Iterable
from typing import Final

from pmda_mmv.directory.budget import BUDGET, collector_paused
from pmda_mmv.directory.containers import Containers
from pmda_mmv.directory.entrytable import EntryTable
from pmda_mmv.directory.filestate import (
    ALL,
    EXITED,
    NOT_READY_GRACE,
    Changes,
    ignore_reason,
)
from pmda_mmv.directory.liveness import exit_problem, running
from pmda_mmv.directory.loader import Loader
from pmda_mmv.directory.resources import Limits, Resources
from pmda_mmv.mmvfile.errors import Changed
from pmda_mmv.mmvfile.pcpdefs import Log
from pmda_mmv.namespace.catalogue import Catalogue
from pmda_mmv.namespace.served import FileEntry

CHECK_BUDGET: Final = 64
"""Served files whose generation and writer one periodic check looks at (round robin)."""
CLOSE_BUDGET: Final = 256
"""Descriptors of unserved files one request closes at least (then more within the
budget)."""
MAX_DIRTY: Final = 4096
"""Names queued (one each, however many events) before the queue becomes one listing."""


class Scanner:
    """State of one MMV directory, which its :class:`~.loader.Loader` loads and serves; see
    the module docstring.  Not thread-safe except for
    :meth:`mark_dirty`, which the watcher thread calls."""

    def __init__(
        self,
        directory: str,
        catalogue: Catalogue,
        *,
        limits: Limits | None = None,
        owners: Iterable[int] | None = None,
        check_interval: float = 0.05,
        not_ready_grace: float = NOT_READY_GRACE,
        log: Log | None = None,
        clock: Callable[[], float] = time.monotonic,
        pidfd: bool = True,
        budget: float | None = BUDGET,
        info: Log | None = None,
    ) -> None:
        # the entries' states and the served files, and what they take of the limits
        self.entries = EntryTable(
            catalogue,
            Resources(limits or Limits()),
            not_ready_grace=not_ready_grace,
            log=log,
            clock=clock,
            pidfd=pidfd,
            info=info,
        )
        self.loader = Loader(directory, self.entries, owners=owners, clock=clock)
        self.directory = directory
        self.catalogue = catalogue
        self.states = self.entries.states  # every entry's state, by name
        self.log = self.entries.log
        self.clock = clock
        self.check_interval = check_interval
        self.budget = budget
        self.reload_requested = False
        self.rescans = 0
        self.deadline: float | None = None  # this request's end of budget (None: unbounded)
        self._dir_key: tuple[int, ...] | None = None
        self._dir_error: str | None = None
        self._list_error: str | None = None
        self._last_check = float("-inf")
        self._check_from = 0  # where the next periodic check starts, in served-name order
        self._dirty: set[str] = set()
        self._starving = False  # a resource freed: the starved files are being retried
        self._dirty_lock = threading.Lock()
        self._heavy_turn = False  # this request, heavy files are not left for later
        self.containers: Containers | None = None  # --containers (containers.py)
        self.only: Collection[str] | None = None  # the entries listed (None: every one)

    # -- queries

    @property
    def pending(self) -> bool:
        """True while a rescan is pending: a file is not ready, or a reload was requested
        (what ``mmv.control.reload`` reports)."""
        return self.reload_requested or self.entries.pending

    @property
    def queued(self) -> int:
        """Names waiting for a later request's budget to be loaded."""
        return self.entries.queued

    @property
    def retries(self) -> int:
        """Retries of files not ready so far (header reads or reopens)."""
        return self.entries.retries

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

    def refresh(
        self,
        force: bool = False,
        bounded: bool | None = None,
        budget: float | None = None,
        charged: float = 0.0,
    ) -> Changes:
        """Bring the catalogue up to date with the directory (within the budget, or
        ``budget`` seconds, less ``charged`` seconds the request spent or will spend on
        other work (:func:`~.budget.charge`), when ``bounded``, by default unless
        ``force``); returns what changed.  The request's end of budget stays in
        :attr:`deadline` for the reloads the fetch itself finds (:meth:`reload`).
        Python's cyclic garbage collector is paused meanwhile
        (:func:`~.budget.collector_paused`)."""
        with collector_paused():
            budget = self.budget if budget is None else budget
            return self._refresh(force, bounded, None if budget is None else budget - charged)

    def _refresh(self, force: bool, bounded: bool | None, budget: float | None) -> Changes:
        changes = self._exited()
        dirty = self._take_dirty()
        now = self.clock()
        bounded = not force if bounded is None else bounded
        # loading and validating take half the budget: cataloguing and the tables the rest
        deadline = now + budget / 2 if bounded and budget is not None else None
        self.deadline = now + budget if bounded and budget is not None else None
        retry = self.entries.due(dirty, now, force)
        if force or self.reload_requested or ALL in dirty or self._directory_changed():
            self.reload_requested = False
            changes.extend(self._rescan())
        else:
            changes.extend(self.enqueue(sorted((dirty - self.entries.not_ready) | retry)))
        if self.containers is not None:
            changes.extend(self.containers.refresh(self, now, deadline, self.clock))
        if force or now - self._last_check >= self.check_interval:
            self._last_check = now
            changes.extend(self._check_served(None if force else CHECK_BUDGET))
        changes.extend(self._drain(deadline))
        self._starving = bool(self.entries.starved) and (self._starving or self.entries.freed)
        if self._starving:
            changes.extend(self._retry_starved(deadline))
        self.entries.saw_freed()  # what the retry itself frees is not a new free
        # thousands removed at once are unserved at once (their names unresolvable) and
        # their descriptors closed over the next requests
        self.entries.close_unserved(deadline, CLOSE_BUDGET)
        return changes

    def enqueue(self, names: Iterable[str]) -> Changes:
        """Queue ``names`` for loading (after those already queued); a name not seen
        before is PENDING until it is reached."""
        return self.entries.enqueue(names)

    def _drain(self, deadline: float | None) -> Changes:
        """Load queued names in order until ``deadline`` (None: all of them).

        Heavy files (whose load would take more than half the budget at the measured load
        rate) take turns with the others: every other request leaves them queued, in
        their place, while the files behind them load, so a stream of new heavy files
        cannot keep a small new file waiting more than a request or two."""
        if not self.entries.queued:
            return Changes()
        # the queue is not copied: a sweep of 100,000 names costs what each request reaches
        # what loading queues meanwhile goes after
        queue = self.entries.take_queue()
        skip = deadline is not None and self.budget is not None and not self._heavy_turn
        self.loader.skip_bytes = (
            int(self.loader.load_rate * self.budget / 2) if skip and self.budget else None
        )
        try:
            changes, stop = self.loader.consider(queue, deadline)
        finally:
            self.loader.skip_bytes = None
        skipped = set(self.loader.skipped)
        self._heavy_turn = bool(skipped)  # the next request, heavy files go first
        if stop is not None or skipped:
            done = list(itertools.takewhile(lambda n: n != stop, queue))
            for name in done:
                if name not in skipped:
                    del queue[name]
            self.entries.put_back(queue)  # a name queued again keeps its place
        return changes

    def _retry_starved(self, deadline: float | None) -> Changes:
        """Files refused (or partly served) for want of a cluster, an indom serial or
        max_total, again in name order, until one still lacks it; past ``deadline`` (once
        one was looked at) the rest wait, still starved, for the next requests."""
        changes = Changes()
        for i, name in enumerate(sorted(self.entries.starved)):
            if deadline is not None and i and self.clock() >= deadline:
                return changes  # _starving stays set: the next request goes on
            self.entries.invalidate([name])
            changes.extend(self.loader.consider([name])[0])
            if name in self.entries.starved:
                break
        self._starving = False
        return changes

    def reload(self, name: str) -> Changes | None:
        """Load ``name`` again now (its values read as changed), when the request's budget
        (:attr:`deadline`) is not spent; else queue it for the next requests and return
        None (its entry stays served meanwhile: the fetch has no values from it)."""
        if self.deadline is not None and self.clock() >= self.deadline:
            self.entries.requeue([name])
            return None
        self.entries.take(name)
        return self.loader.consider([name])[0]

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
            listed = os.listdir(self.directory)
            if self.only is not None:  # check FILE: the entries that can change its verdict
                listed = [n for n in listed if n in self.only]
            names = sorted(n for n in listed if ignore_reason(n) is None)
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
        for gone in sorted(n for n in set(self.states).difference(names) if "/" not in n):
            changes.extend(self.entries.forget(gone))
        # new names first: a new file is visible at the next request however many are known;
        # known names after (one renamed over them has a new stat), within the budget
        changes.extend(self.entries.relist(names))
        return changes

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
            if writer is not None and writer.fd < 0 and not running(writer):
                why = exit_problem(entry.mf.path, entry.mf, writer)
                self.entries.set_state(state, EXITED, why, changes)
        self.entries.requeue(stale)  # reloaded within the budget, this request or the next
        return changes

    def _exited(self) -> Changes:
        """Served files whose writer exited since the last request: one epoll_wait."""
        changes = Changes()
        for name in self.entries.writers.exited():
            state = self.states[name]
            assert state.entry is not None
            mf = state.entry.mf
            self.entries.set_state(state, EXITED, exit_problem(mf.path, mf, state.writer), changes)
        return changes
