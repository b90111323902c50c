"""The ``pcp.pmda.PMDA`` glue: PCP's ``mmv`` agent (domain 70, dynamic root ``mmv``).

Callbacks are thin: the :class:`~.scanner.Scanner` decides what is served, the
:class:`~.catalogue.Catalogue` how it is named, and this module registers the result with
python3-pcp and answers fetch, store, label and text requests.  No exception escapes a
callback: each logs one line and returns a PCP error code.  Importing this module has no
side effects; :func:`main` is what pmcd runs (``pmda-mmv pmda``).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import pwd
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

import cpmapi as c_api
from pcp.pmapi import pmContext, pmUnits
from pcp.pmda import PMDA, pmdaIndom, pmdaInstid, pmdaMetric

from . import format as fmt
from .catalogue import CONTROL_CLUSTER, Catalogue, FileEntry, ServedMetric
from .reader import DEFAULT_MAX_SIZE, MISSING, NO_VALUE, UNSUPPORTED, Changed, Snapshot, printable
from .scanner import Changes, FileState, Scanner
from .watcher import Watcher

Values = dict[int, Any] | list[Any]
"""One metric's values in one fetch, by (unsigned) instance id: a list when the ids are
0..n-1.  Only plain values: anything else is in the table's second part."""
Table = Callable[[], "tuple[Values, dict[int, Any]] | None"]

ERR_INST: Final = [c_api.PM_ERR_INST, 0]
ERR_AGAIN: Final = [c_api.PM_ERR_AGAIN, 0]
NULL: Final = c_api.PM_IN_NULL
SPECIAL: Final = {NO_VALUE: None, UNSUPPORTED: [c_api.PM_ERR_VALUE, 0]}
"""Fetch results of the reader's markers: no value (sentinel), an unreadable string."""

# The agent's own metrics (cluster 0).  Texts of the 6.0.3 C agent, which PCP QA compares.
RELOAD, DEBUG, FILES, METRICS = 0, 1, 2, 3
CONTROL: Final = {
    RELOAD: (
        "control.reload",
        "Control maps reloading",
        "Writing anything other then 0 to this metric will result in\n"
        "re-reading directory and re-mapping files.",
    ),
    DEBUG: (
        "control.debug",
        "Debug flag",
        "See pmdbg(1).  pmstore into this metric to change the debug value.",
    ),
    FILES: (
        "control.files",
        "Memory mapped file count",
        "Count of currently mapped and exported statistics files.",
    ),
}
STATUS_METRICS: Final = (
    "control.metrics",
    "Memory mapped metric count",
    "Count of currently exported metrics, excluding the control metrics.",
)
# Per-file status (--status-metrics): item -> (name, PM_TYPE, oneline, reader of FileState).
FILE_STATUS: Final[dict[int, tuple[str, int, str, Callable[[FileState], object]]]] = {
    10: (
        "control.file.state",
        c_api.PM_TYPE_STRING,
        "State of the file: ok, partial, not-ready, refused or exited",
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
        self.catalogue = Catalogue(opts.prefix, log=self.err)
        self.scanner = Scanner(
            directory, self.catalogue, owners=opts.owners, max_size=opts.max_size, log=self.err
        )
        self.watcher = Watcher(directory, self.scanner.mark_dirty, polling=opts.polling)
        self.debug_value = 0
        self.reload_stored = False  # pmstore mmv.control.reload: notify names at the rescan
        self.tables: dict[int, Table] = {}  # (cluster << 10) | item -> table builder
        self.results: dict[int, dict[int, Values]] = {}  # this fetch's: cluster -> item -> values
        self.special: dict[int, dict[int, Any]] = {}  # this fetch's other results, by key
        self.pmda_metrics: dict[str, pmdaMetric] = {}
        self.by_cluster: dict[int, FileEntry] = {}
        self.snaps: dict[int, Snapshot] = {}
        self.status_instances: list[FileState] = []
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
        self.err(printable(line))

    # -- startup

    def serve(self) -> None:
        """Handshake with pmcd, drop privileges, scan, then answer requests.

        With ``--notready`` (pmcd.conf ``pipe binary notready``) pmcd sends nothing until the
        agent reports ready after its first scan, however long that takes; dbpmda and plain
        ``pipe binary`` lines must not get that report."""
        self.connect_pmcd()
        self.set_user(self.opts.username or pmContext.pmGetConfig("PCP_USER") or "pcp")
        self._guard(self.refresh_metrics, None)(True)
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
        control = dict(CONTROL)
        if self.opts.status_metrics:
            control[METRICS] = STATUS_METRICS
        for item, (name, oneline, text) in control.items():
            metric = pmdaMetric(
                self.pmid(CONTROL_CLUSTER, item),
                c_api.PM_TYPE_32,
                c_api.PM_INDOM_NULL,
                c_api.PM_SEM_INSTANT,
                none,
            )
            self._add(f"{self.opts.prefix}.{name}", metric, oneline, text)
        self.tables[RELOAD] = lambda: ({NULL: int(self.scanner.pending)}, {})
        self.tables[DEBUG] = lambda: ({NULL: self.debug_value}, {})
        self.tables[FILES] = lambda: ({NULL: len(self.catalogue.files)}, {})
        self.tables[METRICS] = lambda: (
            {NULL: sum(len(e.metrics) for e in self.catalogue.files.values())},
            {},
        )
        if self.opts.status_metrics:
            self._add_status_metrics(none)

    def _add_status_metrics(self, none: pmUnits) -> None:
        indom = self.indom(0)
        self.add_indom(pmdaIndom(indom, []), *STATUS_INDOM_HELP)
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
        self.replace_indom(self.indom(0), insts)

    # -- metric table helpers (python3-pcp 6.0.3 keeps help in dicts shared with C)

    def _add(self, name: str, metric: pmdaMetric, oneline: str | None, text: str | None) -> None:
        self.add_metric(name, metric, oneline or "", text or "")
        pmid = metric.m_desc.pmid
        if oneline is None:
            del self._metric_oneline[pmid]  # absent text is PM_ERR_TEXT; "" is served as ""
        if text is None:
            del self._metric_helptext[pmid]
        self.pmda_metrics[name] = metric

    def _remove(self, name: str) -> None:
        metric = self.pmda_metrics.pop(name)
        pmid = metric.m_desc.pmid
        self._metric_oneline.setdefault(pmid, "")
        self._metric_helptext.setdefault(pmid, "")
        self.remove_metric(name, metric)

    def _drop_indom(self, indom: int) -> None:
        """Remove an indom (6.0.3 has no remove_indom; the table is shared with C)."""
        self._indomtable[:] = [e for e in self._indomtable if e.it_indom != indom]
        for table in (self._indoms, self._indom_oneline, self._indom_helptext):
            table.pop(indom, None)

    # -- applying scanner changes

    def refresh_metrics(self, force: bool = False) -> None:
        """Start of every request: bring the served tables up to date."""
        rescans = self.scanner.rescans
        self.apply(self.scanner.refresh(force))
        if self.scanner.rescans != rescans:
            if self.reload_stored:  # an explicit reload re-maps everything, as with C
                self.reload_stored = False
                self.set_notify_change()
            self.watcher.ensure()  # (re)arm after the directory appeared or changed
        elif self.watcher.observer is None:
            self.watcher.ensure()

    def apply(self, changes: Changes) -> None:
        for entry in changes.removed:
            self._unserve(entry)
        for entry in changes.added:
            self._serve(entry)
        if changes.removed or changes.added:
            self.set_notify_change()
        if changes.removed:
            _release_memory()
        if changes.states and self.opts.status_metrics:
            self._update_status_indom()

    def _unserve(self, entry: FileEntry) -> None:
        for sm in entry.metrics:
            self._remove(sm.name)
            self.tables.pop((sm.cluster << 10) | sm.item, None)
        for si in entry.indoms.values():
            self._drop_indom(self.indom(si.serial))
        if self.by_cluster.get(entry.cluster) is entry:
            del self.by_cluster[entry.cluster]
            self.snaps.pop(entry.cluster, None)

    def _serve(self, entry: FileEntry) -> None:
        self.by_cluster[entry.cluster] = entry
        for si in entry.indoms.values():
            insts = [_instid(i.internal, i.external) for i in si.indom.instances]
            indom = self.indom(si.serial)
            self.add_indom(
                pmdaIndom(indom, insts), si.indom.shorthelp or "", si.indom.longhelp or ""
            )
            if si.indom.shorthelp is None:
                del self._indom_oneline[indom]  # absent text is PM_ERR_TEXT
            if si.indom.longhelp is None:
                del self._indom_helptext[indom]
        for sm in entry.metrics:
            indom = self.indom(sm.indom.serial) if sm.indom else c_api.PM_INDOM_NULL
            metric = pmdaMetric(
                self.pmid(sm.cluster, sm.item), sm.type, indom, sm.semantics, _units(sm.units)
            )
            self._add(sm.name, metric, sm.oneline, sm.helptext)
            self.tables[(sm.cluster << 10) | sm.item] = self._file_table(entry, sm)

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
        """Once per cluster per fetch: one consistent snapshot of that file's values."""
        entry = self.by_cluster.get(cluster)
        if entry is None:
            return
        try:
            self.snaps[cluster] = entry.mf.snapshot()
        except Changed as e:
            self.log_line(f"{e}; reloading")
            self.apply(self.scanner.reload(entry.name))
            entry = self.by_cluster.get(cluster)
            if entry is not None:
                self.snaps[cluster] = entry.mf.snapshot()

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
        result, PM_ERR_PMID, PM_ERR_INST or PM_ERR_AGAIN (snapshot unavailable or the
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
        return self.special.get(key, {}).get(inst, ERR_INST)

    def _file_table(self, entry: FileEntry, sm: ServedMetric) -> Table:
        """The table builder of one file metric: (values, other results) by unsigned
        instance id."""
        keys = sm.indom.keys if sm.indom else [c_api.PM_IN_NULL]
        if sm.metric.type == fmt.TYPE_NOSUPPORT:
            return lambda: ({}, {k: [c_api.PM_ERR_APPVERSION, 0] for k in keys})
        mf, metric, snaps, cluster = entry.mf, sm.metric, self.snaps, sm.cluster
        dense = keys == list(range(len(keys)))

        def build() -> tuple[Values, dict[int, Any]] | None:
            snap = snaps.get(cluster)
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
            self.debug_value = int(value)
            return 0
        return int(c_api.PM_ERR_PERMISSION)

    # -- labels

    def label(self, ident: int, ltype: int, notes: int) -> str:
        """Cluster, item and indom labels from the files' LABELS sections; ``notes`` selects
        those with the on-disk OPTIONAL flag."""
        if ltype == c_api.PM_LABEL_CLUSTER:
            entry = self.by_cluster.get(ident)
            return _pick(entry.labels, entry.notes, notes) if entry else "{}"
        if ltype == c_api.PM_LABEL_ITEM:
            sm = self._metric_at((ident >> 10) & 0xFFF, ident & 0x3FF)
            return _pick(sm.labels, sm.notes, notes) if sm else "{}"
        if ltype == c_api.PM_LABEL_INDOM:
            si = self._indom_at(ident & 0x3FFFFF)
            return _pick(si.labels, si.notes, notes) if si else "{}"
        return "{}"

    def instance_label(self, indom: int, inst: int, notes: int) -> str:
        si = self._indom_at(indom & 0x3FFFFF)
        inst = inst - (1 << 32) if inst > 0x7FFFFFFF else inst  # unsigned from python3-pcp
        if si is None or inst not in si.instance_labels:
            return "{}"
        labels, optional = si.instance_labels[inst]
        return _pick(labels, optional, notes)

    def _metric_at(self, cluster: int, item: int) -> ServedMetric | None:
        entry = self.by_cluster.get(cluster)
        if entry is not None:
            for sm in entry.metrics:
                if sm.item == item:
                    return sm
        return None

    def _indom_at(self, serial: int) -> Any:
        cluster = serial >> 11
        for entry in [self.by_cluster.get(cluster), *self.by_cluster.values()]:
            if entry is not None:
                for si in entry.indoms.values():
                    if si.serial == serial:
                        return si
        return None


def _release_memory() -> None:
    """Give freed heap back to the system after files go (glibc keeps it otherwise: the
    soak test saw RSS climb in 30 MiB steps under churn)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).malloc_trim(0)


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
    )


def _owners(p: argparse.ArgumentParser, spec: str | None) -> tuple[int, ...] | None:
    if not spec:
        return None
    uids = []
    for word in spec.split(","):
        word = word.strip()
        try:
            uids.append(int(word) if word.isdigit() else pwd.getpwnam(word).pw_uid)
        except KeyError:
            p.error(f"--owners: unknown user {word!r}")
    return tuple(uids)


def main(argv: Sequence[str]) -> int:
    """``pmda-mmv pmda``: run the agent until pmcd closes the pipe."""
    opts = parse_args(argv)
    if opts.debug:
        os.environ["PCP_PYTHON_DEBUG"] = opts.debug
    MmvPMDA(opts).serve()
    return 0
