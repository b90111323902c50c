"""The ``pcp.pmda.PMDA`` glue: PCP's ``mmv`` agent (domain 70, dynamic root ``mmv``).

Callbacks are thin: the :class:`~.scanner.Scanner` decides what is served, the
:class:`~.catalogue.Catalogue` how it is named, the :class:`~.serving.Serving` model what
each request answers; this module registers the result with python3-pcp (through
:mod:`~.pcpcompat`, the one module that knows python3-pcp's internals) and hands pmcd's
requests to the model.  Every callback is a named method, wrapped by :meth:`MmvPMDA._guard`:
no exception escapes into libpcp_pmda, each logs one line naming the callback and returns
a PCP error code.  Importing this module has no side effects; :func:`main` is what pmcd
runs (``pmda-mmv pmda``).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from typing import Any

import cpmapi as c_api
import psutil  # noqa: F401 -- imported as root before set_user: see liveness
from pcp.pmapi import pmContext
from pcp.pmda import PMDA

from pmda_mmv.agent import control, hold, pcpcompat
from pmda_mmv.agent.assembly import RegistryChoice, assemble
from pmda_mmv.agent.control import DEBUG, FILES, METRICS, RELOAD, ControlMetric
from pmda_mmv.agent.options import Options, parse_args
from pmda_mmv.agent.ratelimit import LogLimit
from pmda_mmv.agent.serving import Serving
from pmda_mmv.directory import fdlimit
from pmda_mmv.directory.budget import STARTUP_BUDGET, charge, collector_paused
from pmda_mmv.directory.departures import Departures
from pmda_mmv.directory.filestate import STATES, Changes
from pmda_mmv.directory.watcher import Watcher
from pmda_mmv.mmvfile import pmunits
from pmda_mmv.mmvfile.errors import Changed
from pmda_mmv.mmvfile.rules import printable
from pmda_mmv.namespace.served import CONTROL_CLUSTER, FileEntry

__all__ = ["MmvPMDA", "main"]

HOLD = hold.HOLD  # the hold of files loaded while more wait (hold.Hold)


class MmvPMDA(PMDA):  # type: ignore[misc]
    """PCP's ``mmv`` agent.  Construct, then :meth:`serve` (blocks until pmcd closes)."""

    def __init__(self, opts: Options) -> None:
        super().__init__(opts.prefix, opts.domain, opts.logfile, "/nonexistent/pmda-mmv/help")
        self.opts = opts
        directory = opts.directory or os.path.join(
            pmContext.pmGetConfig("PCP_TMP_DIR"), opts.prefix
        )
        # one limiter for every line about a file: errors (LOG_ERR) and benign events
        # (LOG_INFO: a writer's exit, a file not ready yet, a number reassigned)
        self.file_log = LogLimit(self.err, info=self.log)
        built = assemble(
            opts,
            directory,
            RegistryChoice(pmContext.pmGetConfig("PCP_VAR_DIR")),
            self.file_log,
            self.file_log.info,
        )  # the registry loaded before the first scan (and before set_user: read as started)
        self.registry, self.catalogue = built.registry, built.catalogue
        self.families, self.scanner = built.families, built.scanner
        self.departures = Departures(directory, self.families, self.registry, self.file_log.info)
        self.watcher = Watcher(directory, self._mark, polling=opts.polling)
        self.model = Serving(self.catalogue, self.log_line, self.families)
        self.reload_stored = False  # pmstore mmv.control.reload: notify names at the rescan
        self.held = hold.Hold()  # loaded, not yet in the tables (HOLD)
        self.rebuilds = False  # this request changed python3-pcp's tables: it rebuilds them
        self.pcp_tables = pcpcompat.PmdaTables(self)  # python3-pcp's own tables, indexed
        self.pmid_hash = pcpcompat.PmidHashReset(opts.domain, opts.pmid_hash_reset)
        self.status_instids = pcpcompat.Instids()  # by file name
        self.indom_instids: dict[int, pcpcompat.Instids] = {}  # by serial, then internal id
        self.own_metrics = 0  # the agent's own metrics among those served
        self._add_control_metrics()
        self._commit()
        self.set_refresh_metrics(self._guard(self.refresh_metrics, None))
        self.set_fetch(self._guard(self.prefetch, None))
        self.set_refresh(self._guard(self.refresh_cluster, None))
        self.set_fetch_callback(self.model.fetcher())
        self.set_store_callback(self._guard(self.store_callback, c_api.PM_ERR_PERMISSION))
        self.set_label(self._guard(self.label_callback, "{}"))
        self.set_notes(self._guard(self.notes_callback, "{}"))
        self.set_label_callback(self._guard(self.instance_label_callback, "{}"))
        self.set_notes_callback(self._guard(self.instance_notes_callback, "{}"))

    def log_line(self, line: str) -> None:
        """One line in the agent's log (pmNotifyErr at LOG_ERR), made printable."""
        self.file_log(printable(line))

    # -- startup

    def serve(self) -> None:
        """Handshake with pmcd, drop privileges, scan, then answer requests.

        With ``--notready`` (pmcd.conf ``pipe binary notready``) pmcd sends nothing until the
        agent reports ready after its first scan, however long that takes; dbpmda and plain
        ``pipe binary`` lines must not get that report."""
        self.connect_pmcd()
        if self.opts.debug and pcpcompat.set_debug(self.opts.debug):
            self.log_line(f"-D {self.opts.debug}: not debug options libpcp accepts (pmdbg -l)")
        if self.pmid_hash.problem:
            self.log_line(self.pmid_hash.problem)
        if not self.opts.containers:  # --containers: stays root, as pmdaproc (containers.py)
            self.set_user(self.opts.username or pmContext.pmGetConfig("PCP_USER") or "pcp")
        # pmcd waits for a notready agent's first scan, answering "Try again": bounded too
        started = time.monotonic()
        self._guard(self.refresh_metrics, None)(True, True, STARTUP_BUDGET)
        self._guard(self._first_scan_line, None)(time.monotonic() - started)
        if self.opts.notready:
            self.pmda_ready()
        self.run()

    def _first_scan_line(self, seconds: float) -> None:
        """One info line: what the first scan loaded, and what waits for the requests;
        escaped, and past the file lines' limiter (one line a start: a first scan of a
        thousand refusals spends the limiter's whole minute)."""
        loaded = sum(state.entry is not None for state in self.scanner.states.values())
        self.log(
            printable(
                f"{self.scanner.directory}: first scan: {loaded} files loaded in "
                f"{seconds:.2f} s, {self.scanner.queued} queued for the next requests"
            )
        )

    def _guard(self, func: Callable[..., Any], fallback: Any) -> Callable[..., Any]:
        """Wrap a callback so that no exception escapes into libpcp_pmda; a failure logs
        the callback's name."""
        name = func.__name__

        def guarded(*args: Any) -> Any:
            try:
                return func(*args)
            except Exception as e:
                self.log_line(f"{name}: {type(e).__name__}: {e}")
                return fallback

        guarded.__name__ = name
        return guarded

    # -- the agent's own metrics

    def _add_control_metrics(self) -> None:
        own = control.control_metrics(self.opts.status_metrics, pcpcompat.debug_options())
        for item, metric in own.items():
            self._add_own(item, metric, c_api.PM_INDOM_NULL)
        self.model.serve_control(RELOAD, self.reload_value)
        self.model.serve_control(DEBUG, pcpcompat.get_debug)
        self.model.serve_control(FILES, self.files_value)
        self.model.serve_control(METRICS, self.metrics_value)
        if self.opts.status_metrics:
            self._update_status_indom()
            for item, status in control.FILE_STATUS.items():
                self._add_own(item, status.metric, self.indom(control.STATUS_SERIAL))
            self._add_states_indom()
            self.model.serve_status(self.scanner.states)

    def _add_states_indom(self) -> None:
        """The states indom (instance id a state's code, named by the state) and
        ``control.files_by_state`` over it."""
        indom, made = self.indom(control.STATES_SERIAL), pcpcompat.Instids()
        insts = [made.get(code, code, state) for code, state in enumerate(STATES)]
        self.pcp_tables.serve_instances(indom, insts, *control.STATES_INDOM_HELP)
        self._add_own(control.FILES_BY_STATE, control.BY_STATE, indom)

    def reload_value(self) -> int:
        """mmv.control.reload: 1 while a rescan is requested or files wait to be loaded."""
        return int(self.scanner.pending)

    def files_value(self) -> int:
        """mmv.control.files: the files served."""
        return len(self.catalogue.files)

    def metrics_value(self) -> int:
        """mmv.control.metrics: one per PMID, however many files share it (PCP QA 648)."""
        return self.pcp_tables.metrics() - self.own_metrics

    def _add_own(self, item: int, metric: ControlMetric, indom: int) -> None:
        pmid, none = self.pmid(CONTROL_CLUSTER, item), bytes(4)
        self.own_metrics += 1
        desc = pcpcompat.metric(pmid, metric.type, indom, metric.semantics, none)
        self._add(f"{self.opts.prefix}.{metric.name}", desc, metric.oneline, metric.helptext)

    def _update_status_indom(self) -> None:
        """The status indom from one pmdaInstid per file, made when the file first shows
        (or its instance changes), not at every change of any file."""
        states, made = self.scanner.states, self.status_instids
        insts = made.many(((s.name, s.instance) for s in states.values()), printable)
        if len(made.cache) > 2 * len(states) + 64:
            made.keep(states)
        indom = self.indom(control.STATUS_SERIAL)
        self.pcp_tables.serve_instances(indom, insts, *control.STATUS_INDOM_HELP)

    # -- metric table helpers (python3-pcp's own tables, indexed: pcpcompat.PmdaTables)

    def _add(self, name: str, metric: bytes, oneline: str | None, text: str | None) -> None:
        self.pcp_tables.add_metric(name, metric, oneline, text)

    def _remove(self, cluster: int, item: int) -> None:
        self.pcp_tables.remove_metric(self.pmid(cluster, item))

    def _commit(self) -> None:
        """Tell python3-pcp of the table edits, if any changed what it copies: it then
        rebuilds its tables (pmdaRehash) when this callback returns, so the PMID hash's
        count is set right first (pmidhash.py)."""
        if self.pcp_tables.commit():
            self.rebuilds = True
            problem = self.pmid_hash.reset()
            if problem:
                self.log_line(problem)

    # -- applying scanner changes

    def _mark(self, name: str) -> None:
        """The watcher's thread saw ``name`` change: queued for the scanner, and for the
        departures thread when it matches a family's pattern."""
        self.scanner.mark_dirty(name)
        self.departures.notice(name)

    def refresh_metrics(
        self, force: bool = False, bounded: bool = True, budget: float | None = None
    ) -> None:
        """Start of every request: bring the served tables up to date, within the
        scanner's budget (or ``budget`` seconds) when ``bounded``; the families' lock held
        (departures.py credits departed members meanwhile)."""
        with self.families.lock, collector_paused():
            self.rebuilds = False
            self.departures.start()
            self.families.restore()  # a family that counted with no member's file: served
            self._refresh(force, bounded, budget)

    def _refresh(self, force: bool, bounded: bool, budget: float | None) -> None:
        rescans = self.scanner.rescans
        changes = self.scanner.refresh(force, bounded, budget, self._register_held())
        taken = self.held.take(changes, self.scanner.queued, time.monotonic())
        if taken is not None:
            self.apply(taken)
        elif changes.states and self.opts.status_metrics:
            self._update_status_indom()  # pending and refused files show while held
            self._commit()
        if self.scanner.rescans != rescans:
            if self.reload_stored:  # an explicit reload re-maps everything, as with C
                self.reload_stored = False
                self.set_notify_change()
            self.watcher.ensure()  # (re)arm after the directory appeared or changed
        elif self.watcher.observer is None:
            self.watcher.ensure()

    def _register_held(self) -> float:
        """Register what is held when it is due (:class:`~.hold.Hold`), before this
        request loads more; returns what that charged the request's budget
        (:func:`~.budget.charge`: the time it took, and python3-pcp's rebuild)."""
        started = time.monotonic()
        if not self.held.due(started):
            return 0.0
        self.apply(self.held.release())
        return charge(time.monotonic() - started, self.model.served_count, self.rebuilds)

    def apply(self, changes: Changes) -> None:
        """Serve the catalogue's new state: every PMID and indom the changed files touch is
        registered again from the files that serve it now (several when they share it).
        Then, however that went, the edits are told to python3-pcp (:meth:`_commit`)."""
        if not changes and not self.families.changed:  # a family served at start: its names
            return
        self.registry.save()  # every new number on disk before pmcd can see it
        try:
            self._apply(changes)
        finally:
            self._commit()

    def _apply(self, changes: Changes) -> None:
        plan = self.model.apply(changes)
        for serial in plan.serials:
            self._serve_indom(serial)
        for cluster, item in plan.pmids:  # every old name leaves before any new one arrives
            self.model.unserve_metric(cluster, item)
            self._remove(cluster, item)
        for cluster, item in plan.pmids:
            self._serve_metric(cluster, item)
        if plan.names:
            self.set_notify_change()
        if changes.states and self.opts.status_metrics:
            self._update_status_indom()

    def _serve_indom(self, serial: int) -> None:
        """Serve PCP indom ``serial`` again: a pmdaInstid made only for an instance new to
        it (or renamed), however many files share it."""
        indom = self.indom(serial)
        served = self.model.indom(serial)
        if served is None:
            self.pcp_tables.drop_indom(indom)
            self.indom_instids.pop(serial, None)
            return
        made = self.indom_instids.setdefault(serial, pcpcompat.Instids())
        insts = [made.get(i, i, n) for i, n in served.instances]
        if len(made.cache) > 2 * len(insts) + 64:
            made.keep(i for i, _ in served.instances)
        self.pcp_tables.serve_instances(indom, insts, served.oneline, served.helptext)

    def _serve_metric(self, cluster: int, item: int) -> None:
        sm = self.model.serve_metric(cluster, item)
        if sm is not None:
            indom = self.indom(sm.indom.serial) if sm.indom else c_api.PM_INDOM_NULL
            desc = pcpcompat.metric(
                self.pmid(cluster, item),
                sm.type,
                indom,
                sm.semantics,
                pmunits.units_bytes(sm.units),
            )
            self._add(sm.name, desc, sm.oneline, sm.helptext)

    # -- fetch (the per-value callback is the model's: Serving.fetcher)

    def prefetch(self) -> None:
        """Start of a fetch (set_fetch)."""
        self.model.prefetch()

    def refresh_cluster(self, cluster: int) -> None:
        """Once per cluster per fetch: one consistent snapshot of each file's values; a
        file changed underneath is reloaded."""
        self.model.snapshot_cluster(cluster, self.reload_changed)

    def reload_changed(self, entry: FileEntry, error: Changed) -> None:
        """A served file changed underneath a fetch: reloaded now within the request's
        budget, else by the next requests (no values from it in this fetch)."""
        self.file_log.info(printable(f"{error}; reloading"))  # benign: a writer rewrote it
        with self.families.lock:  # a member unserved: departures.py credits meanwhile
            changes = self.scanner.reload(entry.name)
            if changes is not None:
                self.apply(changes)

    # -- store

    def store_callback(self, cluster: int, item: int, inst: int, value: Any) -> int:
        """pmstore: control.reload (non-zero rescans at the next request, 0 cancels) and
        control.debug; anything else is PM_ERR_PERMISSION."""
        if cluster != CONTROL_CLUSTER:
            return int(c_api.PM_ERR_PERMISSION)
        if item == RELOAD:
            self.scanner.reload_requested = self.reload_stored = bool(value)
            return 0
        if item == DEBUG:
            return pcpcompat.store_debug(value)
        return int(c_api.PM_ERR_PERMISSION)

    # -- labels (Serving.label, Serving.instance_label)

    def label_callback(self, ident: int, ltype: int) -> str:
        """Cluster, item and indom labels (set_label)."""
        return self.model.label(ident, ltype, False)

    def notes_callback(self, ident: int, ltype: int) -> str:
        """Cluster, item and indom notes, the labels marked OPTIONAL (set_notes)."""
        return self.model.label(ident, ltype, True)

    def instance_label_callback(self, indom: int, inst: int) -> str:
        """An instance's labels (set_label_callback)."""
        return self.model.instance_label(indom, inst, False)

    def instance_notes_callback(self, indom: int, inst: int) -> str:
        """An instance's notes (set_notes_callback)."""
        return self.model.instance_label(indom, inst, True)


def main(argv: Sequence[str]) -> int:
    """``pmda-mmv pmda``: run the agent until pmcd closes the pipe."""
    opts = parse_args(argv)
    fdlimit.raise_soft_limit()  # before the scanner sizes its bounds from it
    if opts.debug:
        os.environ["PCP_PYTHON_DEBUG"] = opts.debug
    MmvPMDA(opts).serve()
    return 0
