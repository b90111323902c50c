"""The ``pcp.pmda.PMDA`` glue: PCP's ``mmv`` agent (domain 70, dynamic root ``mmv``).

Callbacks are thin: the :class:`~.scanner.Scanner` decides what is served, the
:class:`~.catalogue.Catalogue` how it is named, and this module registers the result with
python3-pcp and answers fetch, store, label and text requests.  No exception escapes a
callback: each logs one line and returns a PCP error code.  Importing this module has no
side effects; :func:`main` is what pmcd runs (``pmda-mmv pmda``).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

import cpmapi as c_api
import cpmda
from pcp.pmapi import pmContext, pmUnits
from pcp.pmda import PMDA, pmdaIndom, pmdaInstid, pmdaMetric

from . import layout as fmt
from . import pcpcompat
from .catalogue import CONTROL_CLUSTER, Catalogue, FileEntry, ServedMetric
from .decode import MISSING, NO_VALUE, UNSUPPORTED, Snapshot
from .errors import Changed
from .pmidhash import PmidHashCount, locate
from .ratelimit import LogLimit
from .reader import DEFAULT_MAX_SIZE
from .rules import printable
from .scanner import MAX_TOTAL, Changes, FileState, Scanner, parse_owners
from .watcher import Watcher

Values = dict[int, Any] | list[Any]
"""One metric's values in one fetch, by (unsigned) instance id: a list when the ids are
0..n-1.  Only plain values: anything else is in the table's second part."""
Table = Callable[[], "tuple[Values, dict[int, Any]] | None"]

NO_VALUES: Final = None
"""An instance without a value: PMDA_FETCH_NOVALUE.  The client sees the same as for
PM_ERR_INST (the instance is left out), but libpcp_pmda >= 6.3 logs a warning for every
PM_ERR_INST of every fetch (40,000 instances without values: 9 MB of log per two fetches)."""
ERR_AGAIN: Final = [c_api.PM_ERR_AGAIN, 0]
NULL: Final = c_api.PM_IN_NULL
SPECIAL: Final = {NO_VALUE: None, UNSUPPORTED: [c_api.PM_ERR_VALUE, 0]}
"""Fetch results of the reader's markers: no value (sentinel), an unreadable string."""
HOLD: Final = 0.3
"""Seconds the files loaded while more wait in the scanner's queue may be held back from
the tables (a removal is applied at once, with all that was held): each table change
makes libpcp rebuild the whole namespace, so 10,000 files arriving at once are registered
in a few rebuilds, not one per request."""
HASH_NOTE: Final = "with PCP < 7.0.1 each metric-table change will cost more than the last"

# The agent's own metrics (cluster 0): the C agent's of the installed PCP (pcpcompat).
RELOAD, DEBUG, FILES, METRICS = (
    pcpcompat.RELOAD,
    pcpcompat.DEBUG,
    pcpcompat.FILES,
    pcpcompat.METRICS,
)
# Per-file status (--status-metrics): item -> (name, PM_TYPE, oneline, reader of FileState).
FILE_STATUS: Final[dict[int, tuple[str, int, str, Callable[[FileState], object]]]] = {
    10: (
        "control.file.state",
        c_api.PM_TYPE_STRING,
        "State of the file: ok, partial, pending, not-ready, refused or exited",
        lambda s: s.state,
    ),
    11: (
        "control.file.problems",
        c_api.PM_TYPE_U32,
        "Number of problems found in the file when it was last read",
        lambda s: len(s.problems),
    ),
    12: (
        "control.file.last_problem",
        c_api.PM_TYPE_STRING,
        "The last problem found: file, field, byte offset and reason",
        lambda s: s.last_problem,
    ),
    13: (
        "control.file.metrics",
        c_api.PM_TYPE_U32,
        "Number of metrics served from the file",
        lambda s: len(s.entry.metrics) if s.entry else 0,
    ),
    14: (
        "control.file.values",
        c_api.PM_TYPE_U32,
        "Number of values the file holds",
        lambda s: s.entry.mf.value_count if s.entry else 0,
    ),
    15: (
        "control.file.generation",
        c_api.PM_TYPE_U64,
        "Generation number of the file served",
        lambda s: s.entry.mf.header.g1 if s.entry else 0,
    ),
    16: (
        "control.file.pid",
        c_api.PM_TYPE_32,
        "Writer process id from the file header",
        lambda s: s.entry.mf.header.process if s.entry else 0,
    ),
    17: (
        "control.file.cluster",
        c_api.PM_TYPE_U32,
        "PMID cluster assigned to the file",
        lambda s: s.entry.cluster if s.entry else 0,
    ),
}
STATUS_INDOM_HELP: Final = (
    "MMV files in the directory",
    "One instance per directory entry the agent has looked at, named by "
    "file name, whether it is served or not.",
)


@dataclass(frozen=True)
class Options:
    """Command line of ``pmda-mmv pmda``."""

    domain: int = 70
    prefix: str = "mmv"
    logfile: str = "mmv.log"
    username: str | None = None
    debug: str | None = None
    directory: str | None = None
    status_metrics: bool = False
    owners: tuple[int, ...] | None = None
    polling: bool = False
    notready: bool = False
    max_size: int = DEFAULT_MAX_SIZE
    pmid_hash_reset: bool = True
    max_total: int = MAX_TOTAL


def _units(word: int) -> pmUnits:
    """The pmUnits for an on-disk word, bit for bit (pad/extra bits included)."""
    return pmUnits.from_buffer_copy(word.to_bytes(4, sys.byteorder))


class MmvPMDA(PMDA):  # type: ignore[misc]
    """PCP's ``mmv`` agent.  Construct, then :meth:`serve` (blocks until pmcd closes)."""

    def __init__(self, opts: Options) -> None:
        super().__init__(opts.prefix, opts.domain, opts.logfile, "/nonexistent/pmda-mmv/help")
        self.opts = opts
        directory = opts.directory or os.path.join(
            pmContext.pmGetConfig("PCP_TMP_DIR"), opts.prefix
        )
        self.file_log = LogLimit(self.err)  # one limiter for every line about a file
        self.catalogue = Catalogue(opts.prefix, log=self.file_log)
        self.scanner = Scanner(
            directory,
            self.catalogue,
            owners=opts.owners,
            max_size=opts.max_size,
            max_total=opts.max_total,
            log=self.file_log,
        )
        self.watcher = Watcher(directory, self.scanner.mark_dirty, polling=opts.polling)
        self.reload_stored = False  # pmstore mmv.control.reload: notify names at the rescan
        self.tables: dict[int, Table] = {}  # (cluster << 10) | item -> table builder
        self.results: dict[int, dict[int, Values]] = {}  # this fetch's: cluster -> item -> values
        self.special: dict[int, dict[int, Any]] = {}  # this fetch's other results, by key
        self.pmda_metrics: dict[str, pmdaMetric] = {}
        self.by_cluster: dict[int, list[FileEntry]] = {}  # files in name order
        self.snaps: dict[str, Snapshot] = {}  # per file name, for one fetch
        self.served_names: dict[int, str] = {}  # (cluster << 10) | item -> name
        self.status_instances: list[FileState] = []
        self.held = Changes()  # loaded, not yet in the tables (HOLD)
        self.held_since = 0.0
        self.pcp_tables = pcpcompat.Tables(self)  # python3-pcp's own tables, indexed
        self.pmid_hash = self._locate_pmid_hash()
        self._add_control_metrics()
        self.set_refresh_metrics(self._guard(self.refresh_metrics, None))
        self.set_fetch(self._guard(self.prefetch, None))
        self.set_refresh(self._guard(self.refresh_cluster, None))
        self.set_fetch_callback(self._fetch_callback())
        self.set_store_callback(self._guard(self.store_callback, c_api.PM_ERR_PERMISSION))
        self.set_label(self._guard(lambda i, t: self.label(i, t, 0), "{}"))
        self.set_notes(self._guard(lambda i, t: self.label(i, t, 1), "{}"))
        self.set_label_callback(self._guard(lambda d, i: self.instance_label(d, i, 0), "{}"))
        self.set_notes_callback(self._guard(lambda d, i: self.instance_label(d, i, 1), "{}"))

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
        if isinstance(self.pmid_hash, str):
            self.log_line(f"PMID hash node count not found ({self.pmid_hash}): {HASH_NOTE}")
        self.set_user(self.opts.username or pmContext.pmGetConfig("PCP_USER") or "pcp")
        # pmcd waits for a notready agent's first scan: it is not bounded then
        self._guard(self.refresh_metrics, None)(True, not self.opts.notready)
        if self.opts.notready:
            self.pmda_ready()
        self.run()

    def _guard(self, func: Callable[..., Any], fallback: Any) -> Callable[..., Any]:
        """Wrap a callback so that no exception escapes into libpcp_pmda."""

        def guarded(*args: Any) -> Any:
            try:
                return func(*args)
            except Exception as e:
                self.log_line(f"{getattr(func, '__name__', 'callback')}: {type(e).__name__}: {e}")
                return fallback

        return guarded

    # -- the agent's own metrics

    def _add_control_metrics(self) -> None:
        none = pmUnits(0, 0, 0, 0, 0, 0)
        for item, (name, ptype, oneline, text) in pcpcompat.control_metrics(
            self.opts.status_metrics
        ).items():
            metric = pmdaMetric(
                self.pmid(CONTROL_CLUSTER, item),
                ptype,
                c_api.PM_INDOM_NULL,
                c_api.PM_SEM_INSTANT,
                none,
            )
            self._add(f"{self.opts.prefix}.{name}", metric, oneline, text)
        self.tables[RELOAD] = lambda: ({NULL: int(self.scanner.pending)}, {})
        self.tables[DEBUG] = lambda: ({NULL: pcpcompat.get_debug()}, {})
        self.tables[FILES] = lambda: ({NULL: len(self.catalogue.files)}, {})
        # metrics served: one per PMID, however many files share it (PCP QA 648)
        self.tables[METRICS] = lambda: ({NULL: len(self.served_names)}, {})
        if self.opts.status_metrics:
            self._add_status_metrics(none)

    def _add_status_metrics(self, none: pmUnits) -> None:
        indom = self.indom(0)
        self.pcp_tables.put_indom(pmdaIndom(indom, []), *STATUS_INDOM_HELP)
        for item, (name, ptype, oneline, get) in FILE_STATUS.items():
            metric = pmdaMetric(
                self.pmid(CONTROL_CLUSTER, item), ptype, indom, c_api.PM_SEM_INSTANT, none
            )
            self._add(f"{self.opts.prefix}.{name}", metric, oneline, oneline)
            self.tables[item] = self._status_table(get)

    def _status_table(self, get: Callable[[FileState], object]) -> Table:
        states = self.scanner.states
        return lambda: ({s.instance: get(s) for s in states.values()}, {})

    def _update_status_indom(self) -> None:
        insts = [pmdaInstid(s.instance, printable(s.name)) for s in self.scanner.states.values()]
        self.pcp_tables.put_indom(pmdaIndom(self.indom(0), insts), *STATUS_INDOM_HELP)

    # -- metric table helpers (python3-pcp's own tables, indexed: pcpcompat.Tables)

    def _add(self, name: str, metric: pmdaMetric, oneline: str | None, text: str | None) -> None:
        self.pcp_tables.add_metric(name, metric, oneline, text)
        self.pmda_metrics[name] = metric

    def _remove(self, name: str) -> None:
        metric = self.pmda_metrics.pop(name)
        self.pcp_tables.remove_metric(name, metric)

    # -- applying scanner changes

    def refresh_metrics(self, force: bool = False, bounded: bool = True) -> None:
        """Start of every request: bring the served tables up to date, within the
        scanner's budget when ``bounded``."""
        rescans = self.scanner.rescans
        changes = self.scanner.refresh(force, bounded)
        now = time.monotonic()
        if changes and not self.held:
            self.held_since = now
        self.held.extend(changes)
        if not self.scanner.queued or changes.removed or now - self.held_since >= HOLD:
            changes, self.held = self.held, Changes()
            self.apply(changes)
        elif changes.states and self.opts.status_metrics:
            self._update_status_indom()  # pending and refused files show while held
        if self.scanner.rescans != rescans:
            if self.reload_stored:  # an explicit reload re-maps everything, as with C
                self.reload_stored = False
                self.set_notify_change()
            self.watcher.ensure()  # (re)arm after the directory appeared or changed
        elif self.watcher.observer is None:
            self.watcher.ensure()

    def apply(self, changes: Changes) -> None:
        """Serve the catalogue's new state: every PMID and indom the changed files touch is
        registered again from the files that serve it now (several when they share it).
        Then, however that went, python3-pcp rebuilds its tables (pmdaRehash) when this
        callback returns: the PMID hash's count is set right first (pmidhash.py)."""
        if not changes:
            return
        try:
            self._apply(changes)
        finally:
            self._reset_pmid_hash()

    def _locate_pmid_hash(self) -> PmidHashCount | str | None:
        """The PMID hash's node count to reset (pmidhash.py), or why not (logged at
        startup); None where it is not needed (PCP >= 7.0.1) or ``--no-pmid-hash-reset``."""
        if not self.opts.pmid_hash_reset or not pcpcompat.pmid_hash_defect():
            return None
        return locate(self.opts.domain, cpmda.__file__)

    def _reset_pmid_hash(self) -> None:
        if isinstance(self.pmid_hash, PmidHashCount):
            try:
                self.pmid_hash.reset()
            except OSError as e:
                self.pmid_hash.close()
                self.pmid_hash = f"reset failed: {e}"
                self.log_line(f"PMID hash node count: {self.pmid_hash}: {HASH_NOTE}")

    def _apply(self, changes: Changes) -> None:
        for entry in changes.removed:
            files = [e for e in self.by_cluster.get(entry.cluster, []) if e is not entry]
            self._set_cluster(entry.cluster, files)
            self.snaps.pop(entry.name, None)
        for entry in changes.added:
            files = [e for e in self.by_cluster.get(entry.cluster, []) if e.name != entry.name]
            self._set_cluster(entry.cluster, sorted([*files, entry], key=lambda e: e.name))
        touched = [*changes.removed, *changes.added]
        for serial in sorted({si.serial for e in touched for si in e.indoms.values()}):
            self._serve_indom(serial)
        keys = sorted({(sm.cluster, sm.item) for e in touched for sm in e.metrics})
        for cluster, item in keys:  # every old name leaves before any new one arrives
            self._unserve_metric(cluster, item)
        for cluster, item in keys:
            self._serve_metric(cluster, item)
        if changes.removed or changes.added:
            self.set_notify_change()
        if changes.states and self.opts.status_metrics:
            self._update_status_indom()

    def _set_cluster(self, cluster: int, files: list[FileEntry]) -> None:
        if files:
            self.by_cluster[cluster] = files
        else:
            self.by_cluster.pop(cluster, None)

    def _serve_indom(self, serial: int) -> None:
        """(Re)register PCP indom ``serial``: the instances of every file serving it (first
        name of an id wins), help text of the first file."""
        indom = self.indom(serial)
        self.pcp_tables.drop_indom(indom)
        sources = self.catalogue.indom_sources.get(serial)
        if not sources:
            return
        insts = [_instid(i.internal, i.external) for i in self.catalogue.instances(serial)]
        first = sources[0].indom
        self.pcp_tables.put_indom(pmdaIndom(indom, insts), first.shorthelp, first.longhelp)

    def _unserve_metric(self, cluster: int, item: int) -> None:
        key = (cluster << 10) | item
        old = self.served_names.pop(key, None)
        if old is not None:
            self._remove(old)
        self.tables.pop(key, None)

    def _serve_metric(self, cluster: int, item: int) -> None:
        """(Re)register one PMID from the files serving it: descriptor and help text of the
        first file (in name order), each instance's value from the first file that has it."""
        key = (cluster << 10) | item
        sources = self.catalogue.sources.get((cluster, item))
        if not sources:
            return
        sm = sources[0]
        indom = self.indom(sm.indom.serial) if sm.indom else c_api.PM_INDOM_NULL
        pmid = self.pmid(cluster, item)
        self._add(
            sm.name,
            pmdaMetric(pmid, sm.type, indom, sm.semantics, _units(sm.units)),
            sm.oneline,
            sm.helptext,
        )
        self.served_names[key] = sm.name
        parts = [self._file_table(self.catalogue.files[s.file], s) for s in sources]
        self.tables[key] = parts[0] if len(parts) == 1 else _first_of(parts)

    # -- fetch
    #
    # Per fetch: prefetch clears the tables; refresh_cluster takes one snapshot per file
    # asked for; the first value asked of a metric builds its whole table {instance: result}
    # from the snapshot in bulk (MmvFile.column); every value is then one dict lookup.

    def prefetch(self) -> None:
        self.results.clear()
        self.special.clear()
        self.snaps.clear()

    def refresh_cluster(self, cluster: int) -> None:
        """Once per cluster per fetch: one consistent snapshot of each file's values."""
        for entry in list(self.by_cluster.get(cluster, ())):
            try:
                self.snaps[entry.name] = entry.mf.snapshot()
            except Changed as e:
                self.log_line(f"{e}; reloading")
                self.apply(self.scanner.reload(entry.name))
        for entry in self.by_cluster.get(cluster, ()):
            if entry.name not in self.snaps:
                self.snaps[entry.name] = entry.mf.snapshot()

    def _fetch_callback(self) -> Callable[[int, int, int], Any]:
        """The per-value callback: one lookup in this fetch's values, else
        :meth:`fetch_miss` (the first value of each metric, and anything not a value)."""
        results, miss = self.results, self.fetch_miss

        def fetch_callback(cluster: int, item: int, inst: int) -> Any:
            try:
                return [results[cluster][item][inst], 1]
            except LookupError:
                return miss(cluster, item, inst)

        return fetch_callback

    def fetch_miss(self, cluster: int, item: int, inst: int) -> Any:
        """Build the metric's table for this fetch, or answer the instance's non-value
        result, PM_ERR_PMID, no value or PM_ERR_AGAIN (snapshot unavailable or the
        build failed, logged)."""
        key = (cluster << 10) | item
        tables = self.results.setdefault(cluster, {})
        if item not in tables:
            build = self.tables.get(key)
            if build is None:
                return [c_api.PM_ERR_PMID, 0]
            try:
                built = build()
            except Exception as e:
                self.log_line(f"fetch {cluster}.{item}: {type(e).__name__}: {e}")
                return ERR_AGAIN
            if built is None:
                return ERR_AGAIN
            tables[item], special = built
            if special:
                self.special[key] = special
            try:
                return [tables[item][inst], 1]
            except LookupError:
                pass
        return self.special.get(key, {}).get(inst, NO_VALUES)

    def _file_table(self, entry: FileEntry, sm: ServedMetric) -> Table:
        """The table builder of one file metric: (values, other results) by unsigned
        instance id."""
        keys = sm.indom.keys if sm.indom else [c_api.PM_IN_NULL]
        if sm.metric.type == fmt.TYPE_NOSUPPORT:
            return lambda: ({}, {k: [c_api.PM_ERR_APPVERSION, 0] for k in keys})
        mf, metric, snaps, file = entry.mf, sm.metric, self.snaps, entry.name
        dense = keys == list(range(len(keys)))

        def build() -> tuple[Values, dict[int, Any]] | None:
            snap = snaps.get(file)
            if snap is None:
                return None
            values = mf.column(snap, metric)
            if mf.sliced(snap, metric):
                return (values if dense else dict(zip(keys, values, strict=True))), {}
            plain: dict[int, Any] = {}
            special: dict[int, Any] = {}
            for k, v in zip(keys, values, strict=True):
                if v is NO_VALUE or v is UNSUPPORTED:
                    special[k] = SPECIAL[v]
                elif v is not MISSING:
                    plain[k] = v
            return plain, special

        return build

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

    # -- labels

    def label(self, ident: int, ltype: int, notes: int) -> str:
        """Cluster, item and indom labels from the files' LABELS sections; ``notes`` selects
        those with the on-disk OPTIONAL flag."""
        if ltype == c_api.PM_LABEL_CLUSTER:
            files = self.by_cluster.get(ident)
            return _pick(files[0].labels, files[0].notes, notes) if files else "{}"
        if ltype == c_api.PM_LABEL_ITEM:
            sms = self.catalogue.sources.get(((ident >> 10) & 0xFFF, ident & 0x3FF))
            return _pick(sms[0].labels, sms[0].notes, notes) if sms else "{}"
        if ltype == c_api.PM_LABEL_INDOM:
            sis = self.catalogue.indom_sources.get(ident & 0x3FFFFF)
            return _pick(sis[0].labels, sis[0].notes, notes) if sis else "{}"
        return "{}"

    def instance_label(self, indom: int, inst: int, notes: int) -> str:
        """Labels of an instance, from the first file (in name order) that has it."""
        inst = inst - (1 << 32) if inst > 0x7FFFFFFF else inst  # unsigned from python3-pcp
        for si in self.catalogue.indom_sources.get(indom & 0x3FFFFF, ()):
            if inst in si.indom.positions:
                labels, optional = si.instance_labels.get(inst, ("", ""))
                return _pick(labels, optional, notes)
        return "{}"


def _first_of(parts: list[Table]) -> Table:
    """The table of a PMID several files share: each instance from the first file (in name
    order) that has it; None (PM_ERR_AGAIN) only when no file has a snapshot."""

    def build() -> tuple[Values, dict[int, Any]] | None:
        built = [b for b in (part() for part in parts) if b is not None]
        if not built:
            return None
        values: dict[int, Any] = {}
        special: dict[int, Any] = {}
        for part_values, part_special in built:
            pairs = part_values.items() if isinstance(part_values, dict) else enumerate(part_values)
            for k, v in pairs:
                if k not in values and k not in special:
                    values[k] = v
            for k, v in part_special.items():
                if k not in values and k not in special:
                    special[k] = v
        return values, special

    return build


def _instid(internal: int, external: str) -> pmdaInstid:
    """A pmdaInstid naming the instance with the file's bytes (pmdaInstid itself encodes
    strictly, and an external name need not be UTF-8)."""
    inst = pmdaInstid(internal, "")
    inst.i_name = external.encode("utf-8", "surrogateescape")
    return inst


def _pick(labels: str, notes: str, want_notes: int) -> str:
    return (notes if want_notes else labels) or "{}"


# -- command line -------------------------------------------------------------------------


def parse_args(argv: Sequence[str]) -> Options:
    """Parse the reference's options (-D, -d, -l, -U) plus ours; exits 2 on usage errors."""
    p = argparse.ArgumentParser(
        prog="pmda-mmv pmda",
        description="Serve MMV files to pmcd as PCP's mmv agent (pmcd.conf: "
        "'mmv 70 pipe binary notready .../pmdammv -d 70').",
    )
    p.add_argument("-D", "--debug", help="PCP debug options (pmdbg(1))")
    p.add_argument("-d", "--domain", type=int, default=70, help="PMDA domain (default 70)")
    p.add_argument("-l", "--log", default=None, help="log file (default <prefix>.log)")
    p.add_argument("-U", "--username", help="run as this user (default: the PCP user)")
    p.add_argument("--dir", help="directory of MMV files (default $PCP_TMP_DIR/<prefix>)")
    p.add_argument("--prefix", default="mmv", help="name prefix and PMNS root (default mmv)")
    p.add_argument(
        "--status-metrics",
        action="store_true",
        help="also serve mmv.control.metrics and the per-file mmv.control.file.*",
    )
    p.add_argument(
        "--owners",
        help="serve only files owned by these users (comma-separated "
        "names or uids); default: any owner, as the C agent",
    )
    p.add_argument("--polling", action="store_true", help="poll instead of using inotify")
    p.add_argument(
        "--max-size",
        type=int,
        default=DEFAULT_MAX_SIZE // (1 << 20),
        help="largest file served, in MiB (default 64)",
    )
    p.add_argument(
        "--no-pmid-hash-reset",
        dest="pmid_hash_reset",
        action="store_false",
        help="do not keep libpcp_pmda's PMID-hash node count down (PCP < 7.0.1 only; "
        "later PCPs never need it)",
    )
    p.add_argument(
        "--max-total",
        type=int,
        default=MAX_TOTAL >> 20,
        help="most bytes of all served files together, in MiB (default 1024)",
    )
    p.add_argument(
        "--notready",
        action="store_true",
        help="pmcd.conf has 'notready': report ready to pmcd after the first scan",
    )
    a = p.parse_args(argv)
    return Options(
        domain=a.domain,
        prefix=a.prefix,
        logfile=a.log or f"{a.prefix}.log",
        username=a.username,
        debug=a.debug,
        directory=a.dir,
        status_metrics=a.status_metrics,
        owners=_owners(p, a.owners),
        polling=a.polling,
        notready=a.notready,
        max_size=a.max_size << 20,
        pmid_hash_reset=a.pmid_hash_reset,
        max_total=a.max_total << 20,
    )


def _owners(p: argparse.ArgumentParser, spec: str | None) -> tuple[int, ...] | None:
    try:
        return parse_owners(spec)
    except ValueError as e:
        p.error(str(e))


def main(argv: Sequence[str]) -> int:
    """``pmda-mmv pmda``: run the agent until pmcd closes the pipe."""
    opts = parse_args(argv)
    if opts.debug:
        os.environ["PCP_PYTHON_DEBUG"] = opts.debug
    MmvPMDA(opts).serve()
    return 0
