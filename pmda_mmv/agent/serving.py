"""The serving model: what the agent answers pmcd, as data and lookups, without PCP.

:class:`Serving` keeps the tables the callbacks of :mod:`pmda_mmv.agent.pmda` read: the files
serving each cluster (in name order), the table builder of each PMID, and, for one fetch,
the files' snapshots and the values built from them.  It also answers label requests and
serves the agent's own metrics (``<prefix>.control.*``, defined in :mod:`.control`).
Registering PMIDs and indoms with python3-pcp is the glue's part; this module says which
ones changed (:meth:`Serving.apply`) and what they are.  No ``pcp`` import: it is tested
without pmcd (``tests/unit/agent/test_serving.py``), like the catalogue.

Keys: a PMID is ``(cluster, item)``, packed as ``(cluster << 10) | item``
(:func:`pmid_key`); instance ids are unsigned, as pmcd hands them to python3-pcp callbacks
(``PM_IN_NULL`` for a singular metric).  A fetch result is the list ``[value, 1]`` or
``[PM_ERR_*, 0]``, or None for "no value" (PMDA_FETCH_NOVALUE).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from pmda_mmv.agent.aggregate import FamilyTable
from pmda_mmv.agent.control import FILE_STATUS, FILES_BY_STATE, state_counts
from pmda_mmv.agent.tables import (
    ERR_AGAIN,
    ERR_PMID,
    NO_VALUES,
    SINGULAR,
    Built,
    FileTable,
    Table,
    Values,
    first_of,
    status_table,
)
from pmda_mmv.directory.filestate import Changes, FileState
from pmda_mmv.mmvfile import layout, limits
from pmda_mmv.mmvfile.decode import Snapshot
from pmda_mmv.mmvfile.errors import Changed
from pmda_mmv.mmvfile.pcpdefs import PM_ERR_APPVERSION, PM_IN_NULL, Log
from pmda_mmv.namespace.catalogue import Catalogue
from pmda_mmv.namespace.family import Families
from pmda_mmv.namespace.served import CONTROL_CLUSTER, FileEntry, ServedIndom, ServedMetric


def pmid_key(cluster: int, item: int) -> int:
    """A PMID's key in :attr:`Serving.tables`: ``(cluster << 10) | item``."""
    return (cluster << 10) | item


# -- what changed ---------------------------------------------------------------------------


@dataclass
class Plan:
    """What the glue registers again after :meth:`Serving.apply`: the PCP indom serials
    and PMIDs (``(cluster, item)``) the changed files touch, sorted; ``names`` is whether
    the namespace changed (pmcd is told)."""

    serials: list[int] = field(default_factory=list)
    pmids: list[tuple[int, int]] = field(default_factory=list)
    names: bool = False


class MergedIndom(NamedTuple):
    """A PCP indom as served: instances ``(internal id, external name)`` merged over the
    files serving it (first name of an id wins), help text of the first file."""

    instances: list[tuple[int, str]]
    oneline: str | None
    helptext: str | None


# -- the model ------------------------------------------------------------------------------


class Serving:
    """The tables behind the callbacks (see the module docstring).

    ``log`` receives a line for a table that failed to build (the fetch answers
    PM_ERR_AGAIN)."""

    def __init__(self, catalogue: Catalogue, log: Log, families: Families) -> None:
        self.catalogue = catalogue
        self.families = families
        self.log = log
        # pmid_key(cluster, item) -> its table builder: the agent's own metrics, families'
        # and PMIDs files share; a PMID one file serves has none (read from the
        # catalogue's sources by the fetch that asks for it: no entry a name)
        self.tables: dict[int, Table] = {}
        self.by_cluster: dict[int, list[FileEntry]] = {}  # files in name order
        # the first file serving each instance of a PCP indom (internal id, as on disk),
        # built at the first request after a change to the indom's files
        self.instance_indoms: dict[int, dict[int, ServedIndom]] = {}
        # each file's table builder of a PMID several files share: kept while the file
        # serves it, so that a file more makes one builder, not one per file sharing it
        self.parts: dict[str, dict[int, Table]] = {}
        # this fetch's: snapshots per file name, values per cluster and item, and the
        # results that are not values per key
        self.snaps: dict[str, Snapshot] = {}
        self.results: dict[int, dict[int, Values]] = {}
        self.special: dict[int, dict[int, Any]] = {}

    # -- the agent's own metrics

    def serve_control(self, item: int, read: Callable[[], object]) -> None:
        """Serve control metric ``item`` (singular) with the value ``read()``."""

        def control_table() -> Built:
            return {PM_IN_NULL: read()}, {}

        self.tables[pmid_key(CONTROL_CLUSTER, item)] = control_table

    def serve_status(self, states: Mapping[str, FileState]) -> None:
        """Serve the per-file status metrics over ``states`` (the scanner's, live), and
        their count per state."""
        for item, status in FILE_STATUS.items():
            self.tables[pmid_key(CONTROL_CLUSTER, item)] = status_table(states, status.read)

        def by_state() -> Built:
            return state_counts(states), {}

        self.tables[pmid_key(CONTROL_CLUSTER, FILES_BY_STATE)] = by_state

    @property
    def served_count(self) -> int:
        """How many PMIDs the files serve (the catalogue's count: no dictionary made)."""
        return len(self.catalogue.sources)

    @property
    def served_names(self) -> dict[int, str]:
        """The names the files serve by PMID key, read from the catalogue at each call (no
        dictionary of names kept: a name costs its entry in the catalogue only)."""
        return {pmid_key(*p): sms[0].name for p, sms in self.catalogue.sources.items()}

    # -- applying the scanner's changes

    def apply(self, changes: Changes) -> Plan:
        """Take the changed files into :attr:`by_cluster` (each cluster's list rebuilt at
        most once, however many of its files changed) and say which indoms and PMIDs the
        glue must register again (:meth:`unserve_metric` each, then :meth:`serve_metric`
        each, so that every old name leaves before any new one arrives)."""
        gone: dict[int, set[int]] = {}
        new: dict[int, dict[str, FileEntry]] = {}
        for entry in changes.removed:
            for cluster in entry.clusters:  # its own and its spill clusters
                gone.setdefault(cluster, set()).add(id(entry))
            self.snaps.pop(entry.name, None)
            self.parts.pop(entry.name, None)
        for entry in changes.added:  # a name added twice: the last one is served
            for cluster in entry.clusters:
                new.setdefault(cluster, {}).pop(entry.name, None)
                new[cluster][entry.name] = entry
        for cluster in gone.keys() | new.keys():
            self._set_cluster(cluster, gone.get(cluster, set()), new.get(cluster, {}))
        touched = [*changes.removed, *changes.added]
        serials = sorted({si.serial for e in touched for si in e.indoms.values()})
        pmids, family_serials = self.families.take()  # the families' members changed
        serials = sorted({*serials, *family_serials})
        for serial in serials:
            self.instance_indoms.pop(serial, None)
        pmids |= {(sm.cluster, sm.item) for e in touched for sm in e.metrics}
        return Plan(serials, sorted(pmids), bool(touched) or bool(pmids))

    def _set_cluster(self, cluster: int, gone: set[int], new: dict[str, FileEntry]) -> None:
        old = self.by_cluster.get(cluster, [])
        files = [e for e in old if id(e) not in gone and e.name not in new]
        if len(new) == 1 and files:  # one file more: no sort of the whole list
            [entry] = new.values()
            bisect.insort(files, entry, key=_name)
        elif new:
            files = sorted([*files, *new.values()], key=_name)
        if files:
            self.by_cluster[cluster] = files
        else:
            self.by_cluster.pop(cluster, None)

    def indom(self, serial: int) -> MergedIndom | None:
        """PCP indom ``serial`` as served now, or None when no file serves it."""
        sources = self.catalogue.indom_sources.get(serial)
        if not sources:
            self.instance_indoms.pop(serial, None)
            return None
        by_instance: dict[int, ServedIndom] = {}
        insts = []
        for si in sources:
            for inst in si.indom.instances:
                if inst.internal not in by_instance:
                    by_instance[inst.internal] = si
                    insts.append((inst.internal, inst.external))
        self.instance_indoms[serial] = by_instance
        first = sources[0].indom
        return MergedIndom(insts, first.shorthelp, first.longhelp)

    def unserve_metric(self, cluster: int, item: int) -> None:
        """Stop serving a PMID."""
        self.tables.pop(pmid_key(cluster, item), None)

    def serve_metric(self, cluster: int, item: int) -> ServedMetric | None:
        """Serve a PMID from the files serving it now: returns the first file's metric (in
        name order), whose name, descriptor and help text the PMID has; each instance's
        value comes from the first file that has it.  None when no file serves it."""
        sources = self.catalogue.sources.get((cluster, item))
        if not sources:
            return None
        k = pmid_key(cluster, item)
        family = self.families.by_cluster.get(cluster)
        if family is not None:
            self.tables[k] = FamilyTable(family, sources[0], self._member_part)
        elif len(sources) == 1:
            self.tables.pop(k, None)  # read from the catalogue's sources at the fetch
        else:
            self.tables[k] = self._shared(list(sources), k)
        return sources[0]

    def _shared(self, sources: list[ServedMetric], k: int) -> Table:
        """The table of PMID ``k`` shared by the files of ``sources``: their builders are
        looked up at the fetch (one copy of the list here, whatever its length)."""

        def build() -> Built | None:
            return first_of([self._part(s, k) for s in sources])()

        return build

    def _member_part(self, sm: ServedMetric) -> Table:
        return self._part(sm, pmid_key(sm.cluster, sm.item))

    def _part(self, sm: ServedMetric, k: int) -> Table:
        """The table builder of one file's metric of PMID ``k``, made once per metric."""
        parts = self.parts.setdefault(sm.file, {})
        made = parts.get(k)
        if made is None or getattr(made, "sm", None) is not sm:
            made = parts[k] = self.file_table(self.catalogue.files[sm.file], sm)
        return made

    # -- fetch
    #
    # Per fetch: prefetch clears this fetch's tables; snapshot_cluster takes one snapshot
    # per file asked for; the first value asked of a metric builds its whole table
    # {instance: result} from the snapshot in bulk (MmvFile.column); every value is then
    # one dict lookup.

    def prefetch(self) -> None:
        """Start of a fetch: forget the previous fetch's snapshots and values."""
        self.results.clear()
        self.special.clear()
        self.snaps.clear()

    def snapshot_cluster(self, cluster: int, changed: Callable[[FileEntry, Changed], None]) -> None:
        """One consistent snapshot of each file serving ``cluster`` (one per file per fetch,
        whichever of its clusters asks first).  A file that changed
        underneath goes to ``changed`` (which reloads it); then every file serving the
        cluster now and not yet copied is copied (one that changed again, or whose reload
        waits for a later request's budget, has no snapshot in this fetch)."""
        for entry in self._files(cluster):
            if entry.name in self.snaps:  # copied for another of its clusters (spills)
                continue
            try:
                self.snaps[entry.name] = entry.mf.snapshot()
            except Changed as e:
                changed(entry, e)
        for entry in self._files(cluster):
            if entry.name not in self.snaps:
                try:
                    self.snaps[entry.name] = entry.mf.snapshot()
                except Changed:  # changed again, or its reload waits for the budget
                    continue  # no values from it in this fetch; the others have theirs

    def _files(self, cluster: int) -> list[FileEntry]:
        """The files serving ``cluster``: its own, or a family's members."""
        files = self.by_cluster.get(cluster)
        return list(files) if files else self.families.entries(cluster)

    def fetcher(self) -> Callable[[int, int, int], Any]:
        """The per-value fetch callback: one lookup in this fetch's values, else
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
        result, PM_ERR_PMID, no value or PM_ERR_AGAIN (snapshot unavailable or the build
        failed, logged)."""
        k = pmid_key(cluster, item)
        cluster_values = self.results.setdefault(cluster, {})
        if item not in cluster_values:
            build = self.tables.get(k) or self._one_file(cluster, item)
            if build is None:
                return ERR_PMID
            try:
                built = build()
            except Exception as e:
                self.log(f"fetch {cluster}.{item}: {type(e).__name__}: {e}")
                return ERR_AGAIN
            if built is None:
                return ERR_AGAIN
            cluster_values[item], special = built
            if special:
                self.special[k] = special
            try:
                return [cluster_values[item][inst], 1]
            except LookupError:
                pass
        return self.special.get(k, {}).get(inst, NO_VALUES)

    def _one_file(self, cluster: int, item: int) -> Table | None:
        """The table builder of a PMID without one kept (:attr:`tables`), for this fetch:
        the file serving it, from the catalogue's sources (several while files sharing
        it wait to be served, each of their builders kept; none: PM_ERR_PMID)."""
        sources = self.catalogue.sources.get((cluster, item))
        if not sources or cluster in self.families.by_cluster:
            return None
        if len(sources) > 1:
            return self._shared(list(sources), pmid_key(cluster, item))
        return self.file_table(self.catalogue.files[sources[0].file], sources[0])

    def file_table(self, entry: FileEntry, sm: ServedMetric) -> Table:
        """The table builder of one file's metric: (values, other results) by unsigned
        instance id, from this fetch's snapshot of the file."""
        if sm.metric.type == layout.TYPE_NOSUPPORT:
            keys = sm.indom.keys if sm.indom else SINGULAR
            unsupported = {k: [PM_ERR_APPVERSION, 0] for k in keys}
            return lambda: ({}, unsupported)
        return FileTable(sm, entry, self.snaps)

    # -- labels

    def label(self, ident: int, ltype: int, notes: bool) -> str:
        """Cluster, item and indom labels (PM_LABEL_* ``ltype``; ``ident`` a PMID or an
        indom, domain included) from the files' LABELS sections; ``notes`` selects those
        with the on-disk OPTIONAL flag.  "{}" when there are none."""
        if ltype == layout.LABEL_CLUSTER:  # a spill cluster's are its file's cluster labels
            files = self.by_cluster.get(ident)
            return pick(files[0].labels, files[0].notes, notes) if files else "{}"
        if ltype == layout.LABEL_ITEM:
            sms = self.catalogue.sources.get(((ident >> 10) & 0xFFF, ident & 0x3FF))
            return pick(sms[0].labels, sms[0].notes, notes) if sms else "{}"
        if ltype == layout.LABEL_INDOM:
            sis = self.catalogue.indom_sources.get(ident & limits.MAX_SERIAL)
            return pick(sis[0].labels, sis[0].notes, notes) if sis else "{}"
        return "{}"

    def instance_label(self, indom: int, inst: int, notes: bool) -> str:
        """Labels of an instance (unsigned id, as python3-pcp passes it), from the first
        file (in name order) that has it."""
        inst = inst - (1 << 32) if inst > 0x7FFFFFFF else inst
        serial = indom & limits.MAX_SERIAL
        by_instance = self.instance_indoms.get(serial)
        if by_instance is None:
            self.indom(serial)  # the indom serving each instance, once per change
            by_instance = self.instance_indoms.get(serial, {})
        si = by_instance.get(inst)
        if si is None:
            return "{}"
        labels, optional = si.instance_labels.get(inst, ("", ""))
        return pick(labels, optional, notes)


def pick(labels: str, notes: str, want_notes: bool) -> str:
    """The label set asked for: the notes or the labels, "{}" for none."""
    return (notes if want_notes else labels) or "{}"


def _name(entry: FileEntry) -> str:
    return entry.name
