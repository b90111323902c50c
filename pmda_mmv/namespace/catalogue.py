"""Many MMV files to one PCP namespace: clusters, PMIDs, indoms, names, labels and help.

Pure bookkeeping with no PCP imports: the agent turns the :class:`FileEntry` records made here
into ``pcp.pmda`` metrics and indoms.  Rules (see the README's differences table for where they
improve on the C pmdammv, ``pmdammv-reference.md`` section 5):

* Cluster 0 is the agent's own.  A file's header cluster (1..4095) is honoured when no other
  served file holds it, or when the file agrees with the files holding it (same name and
  descriptor at every shared item: the processes of one application adding instances to
  the same metrics, PCP QA 648) and has the same owner (uid), so that a stranger cannot
  join another user's cluster and indoms; cluster 0, or a taken cluster, gets the lowest
  free cluster not asked for by another file, with a warning when the file asked for it.  A
  file reloaded under the same name keeps its cluster when it can, so PMIDs stay stable for
  archives.
* Names are ``<prefix>.<file>.<metric>``, or ``<prefix>.<metric>`` for NOPREFIX files.  A name
  that is already served, that is a leaf where another is a non-leaf (``a.b`` and ``a.b.c``),
  or that falls under a reserved subtree (``mmv.control``) is refused; files already served win,
  then files of one scan in name order.  A name a file defines twice is served once, from
  its first entry, spilled or not (:func:`~.rules.first_named`): the later one is refused.
* PCP indom serials (22 bits) are chosen as :mod:`~.indomserial` says; files sharing a
  cluster share its indoms.
* Spill clusters (docs/spill.md): a metric the C agent would drop for its item (past 1023,
  or an item an earlier metric of the file has: :attr:`~.parsed.Metric.spill`) is served
  under a further cluster of its file, at a PMID remembered in the identity registry by
  the file's key and the metric's name; new ones are placed in name order, at
  ``fnv1a32(name) & 1023`` with linear probing, in the file's spill clusters in the order
  they were taken, a new one (as a cluster-0 file's) when they are full.  A number another
  name of the file held is not given again while that name is remembered (at most
  :data:`SPILL_CAP` names a file).
* Refusals for want of a resource (no free cluster, no free indom serial) are retried when
  one frees up: :attr:`Catalogue.freed_listeners` are called at each release.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from functools import partial

from pmda_mmv.mmvfile import layout
from pmda_mmv.mmvfile.errors import Problem
from pmda_mmv.mmvfile.parsed import Instance
from pmda_mmv.mmvfile.pcpdefs import Log
from pmda_mmv.mmvfile.reader import MmvFile
from pmda_mmv.mmvfile.rules import first_named, merge_labels, name_problem, printable
from pmda_mmv.namespace import spill
from pmda_mmv.namespace.clusters import Asked, Clusters
from pmda_mmv.namespace.indomserial import indom_serial, used_indoms
from pmda_mmv.namespace.nametree import NameTree
from pmda_mmv.namespace.registry import Registry
from pmda_mmv.namespace.served import (
    FileEntry,
    ServedIndom,
    ServedMetric,
    Sources,
    merged_instances,
    same_metric,
    served_metric,
)

Watch = Callable[[FileEntry], None]


class Catalogue:
    """The namespace of all served files.

    ``add`` a loaded :class:`MmvFile` (returns its :class:`FileEntry`, or None when the file
    cannot be served at all), ``remove`` it by name.  ``log`` receives one line per refusal or
    warning, naming the file."""

    def __init__(
        self,
        prefix: str = "mmv",
        reserved: Iterable[str] = ("control",),
        log: Log | None = None,
        *,
        info: Log | None = None,
        registry: Registry | None = None,
    ) -> None:
        self.prefix = prefix
        self.reserved = {f"{prefix}.{r}" for r in reserved}
        self.family_trees: dict[str, str] = {}  # <prefix>.NAME -> family NAME (family.py)
        sink: Log = log or (lambda line: None)
        self.log: Log = lambda line: sink(printable(line))
        benign: Log = info or sink
        self.info: Log = lambda line: benign(printable(line))  # benign events (LOG_INFO)
        self.registry = registry if registry is not None else Registry()
        self.clusters = Clusters(self.registry, self.log, self.info)  # who holds each cluster
        self.refusal: Problem | None = None  # why the last add() returned None
        self.starved = False  # whether it returned None for want of a cluster
        self.freed_listeners: list[Callable[[], None]] = []  # told: a cluster or serial freed
        self.files: dict[str, FileEntry] = {}
        self._by_cluster: dict[int, dict[str, None]] = {}  # cluster -> its files, in order
        self.tree = NameTree()  # the served names
        self.leaves = self.tree.leaves
        self.leaf_pmid: Mapping[str, tuple[int, int]] = self.tree.values  # name -> PMID
        self.indom_keys: dict[tuple[int, int], int] = {}  # (cluster, file serial) -> PCP
        # Files sharing a cluster (PCP QA 648): per PMID and per PCP indom serial, the entry
        # of every file serving it, in file-name order; the first one describes it.
        self.sources: Sources[tuple[int, int], ServedMetric] = Sources()
        self.indom_sources: Sources[int, ServedIndom] = Sources()
        self.on_add: Watch | None = None  # told of every file served (:meth:`watch`)
        self.on_remove: Watch | None = None  # and unserved

    def watch(self, on_add: Watch, on_remove: Watch) -> None:
        """Tell ``on_add`` of every file served from now on, ``on_remove`` of every file
        unserved (before its descriptor is closed)."""
        self.on_add, self.on_remove = on_add, on_remove

    # -- the indexes: written here only, as files and families claim and release

    def claim_metric(self, sm: ServedMetric) -> None:
        """Serve ``sm`` at its PMID: the PMID's first source claims its name; the files
        sharing a cluster join it there, in file-name order."""
        pmid = (sm.cluster, sm.item)
        if pmid not in self.sources:
            self.tree.claim(sm.name, pmid)
        self.sources.link(pmid, sm)

    def release_metric(self, sm: ServedMetric) -> None:
        """``sm`` is served no more; its name goes with the PMID's last source."""
        if not self.sources.unlink((sm.cluster, sm.item), sm):
            self.tree.release(sm.name)

    def claim_indom(self, cluster: int, serial: int, si: ServedIndom) -> None:
        """Serve ``si`` as file indom ``serial`` of ``cluster``."""
        self.indom_keys[(cluster, serial)] = si.serial
        self.indom_sources.link(si.serial, si)

    def release_indom(self, cluster: int, serial: int, si: ServedIndom) -> bool:
        """``si`` is served no more; True when it was its PCP serial's last source."""
        if self.indom_sources.unlink(si.serial, si):
            return False
        self.indom_keys.pop((cluster, serial), None)
        return True

    def reserve_tree(self, family: str) -> None:
        """No file takes a name under ``<prefix>.<family>``: the family's own."""
        self.family_trees[f"{self.prefix}.{family}"] = family

    # -- clusters

    def served_to(self, cluster: int) -> str:
        """The first file served under ``cluster`` (as its own), or "?"."""
        return next(iter(self._by_cluster.get(cluster, ())), "?")

    def take_cluster(self, cluster: int | None, uid: int, holder: str) -> int | None:
        """Hold ``cluster`` (None: a free one, as for a file asking for none) for ``holder``
        alone, a family: no file may share it (as a spill cluster)."""
        if cluster is None:
            return self.clusters.hold_free(set(), uid, holder)
        self.clusters.hold(cluster, uid, holder)
        return cluster

    def release_cluster(self, cluster: int) -> None:
        """A family's ``cluster`` is served no more (its registry record still holds it)."""
        self.clusters.give_back(cluster)

    def shareable(self, mf: MmvFile, cluster: int) -> bool:
        """Whether ``mf`` may join the files already serving ``cluster``, as the processes of
        one application do when each adds its instances to the same metrics (PCP QA 648):
        the files have the same owner, and every metric of ``mf`` is either the one the
        cluster serves at that item (same name, type, semantics, units and file indom
        serial) or new, at a free item, under a name not served elsewhere (spilled metrics
        aside: each file has spill clusters of its own, and a spilled name another file
        serves is refused, so the processes of one application still share)."""
        held = self.clusters
        if held.held_by[cluster][0] != mf.uid or cluster in held.spill_owner:
            return False
        stem = self._stem(mf)
        first = first_named(mf.metrics)
        for metric in mf.metrics:
            if metric.spill or first[metric.name] is not metric:  # not shared (see _add_metrics)
                continue
            name = f"{stem}.{metric.name}"
            served = self.sources.get((cluster, metric.item))
            if served:
                if not same_metric(served[0], name, metric):
                    return False
            elif name in self.leaves:
                return False
        return True

    def names_of(self, mf: MmvFile) -> list[str]:
        """The full names ``mf``'s accepted metric entries ask for, in file order."""
        stem = self._stem(mf)
        return [f"{stem}.{m.name}" for m in mf.metrics]

    def holder(self, name: str, cluster: int | None = None, item: int = -1) -> str | None:
        """The served file a metric called ``name`` (at ``item`` of ``cluster``) lost to:
        the file serving that PMID, that name, a leaf above it or a name below it."""
        served = self.sources.get((cluster, item)) if cluster is not None else None
        if served:
            return served[0].file
        blocking = self.tree.blocking(name)
        files = {sm.file for leaf in blocking for sm in self.sources[self.leaf_pmid[leaf]]}
        return next((f for f in self.files if f in files), None)  # the first added

    def _stem(self, mf: MmvFile) -> str:
        """``<prefix>.<file>``; a container's file (``containers/<name>/<file>``, with
        NOPREFIX too) stays under ``<prefix>.containers.<name>``."""
        scope, _, name = mf.name.rpartition("/")
        top = f"{self.prefix}.{scope.replace('/', '.')}" if scope else self.prefix
        return top if mf.header.noprefix else f"{top}.{name}"

    def instances(self, serial: int) -> list[Instance]:
        """Instances of PCP indom ``serial`` over every file serving it, in file-name order;
        an internal id met again keeps its first name (as the C agent merges them)."""
        return merged_instances(self.indom_sources.get(serial, ()))

    def name_conflict(self, name: str, family: str | None = None, scope: str = "") -> str | None:
        """Why ``name`` cannot be added now (by ``family``, else by a file), or None; a name
        under the file's own ``scope`` (a container's, :meth:`_stem`) is not under a
        reserved subtree."""
        if scope and name.startswith(f"{self.prefix}.{scope.replace('/', '.')}."):
            return self.tree.conflict(name)
        for reserved in self.reserved:
            if name == reserved or name.startswith(reserved + "."):
                return f"{name} is reserved for the agent"
        for tree, owner in self.family_trees.items():
            if owner != family and (name == tree or name.startswith(tree + ".")):
                return f"{name} is reserved for family {owner}"
        return self.tree.conflict(name)

    def indom_serial(
        self, name: str, cluster: int, serial: int, wanted: set[int], uid: int = 0
    ) -> int | None:
        """The PCP serial for indom ``serial`` of file ``name`` served in ``cluster`` (owner
        ``uid``): the one the files sharing the cluster serve it under, else as
        :func:`~.indomserial.indom_serial` says; None when no number at all is free."""
        shared = self.indom_keys.get((cluster, serial))
        if shared is not None:  # a file sharing the cluster (same owner, agreeing) has it
            return shared
        at = (cluster, serial)
        return indom_serial(self.registry, self.indom_sources, (name, uid), at, wanted)

    # -- files

    def add(
        self, mf: MmvFile, requested: Asked | None = None, wanted: set[int] | None = None
    ) -> FileEntry | None:
        """Serve ``mf`` (replacing a file of the same name).  Returns its entry, or None when
        its name is not a valid name component or no cluster is free (logged once, and kept
        in :attr:`refusal`; :attr:`starved` says which).  ``requested``: clusters the scan's
        files ask for (its own too); ``wanted``: their indom numbers (:meth:`wanted_indoms`)."""
        if mf.name in self.files:
            self.remove(mf.name)
        self.starved = False
        why = name_problem(mf.name.replace("/", "."))
        if why and not mf.header.noprefix:
            invalid = f"file name {mf.name!r} is not a valid metric name component ({why})"
            return self._refuse_file(Problem(path=mf.path, message=f"{invalid}, file not served"))
        cluster = self.clusters.choose(mf, requested or set(), self)
        if cluster is None:
            self.starved = True
            why = "no free cluster, file not served"
            at = layout.HEADER.at["cluster"]
            return self._refuse_file(
                Problem(path=mf.path, field="header.cluster", message=why, offset=at)
            )
        entry = FileEntry(mf, cluster)
        self.clusters.take(cluster, mf.uid)
        self._add_indoms(entry, wanted or set())
        self._spill(entry, requested or set())
        self._add_metrics(entry)
        entry.labels, entry.notes = merge_labels(
            mf.labels_for(layout.LABEL_CLUSTER, mf.header.cluster)
        )
        entry.identity = self.clusters.identity
        self.files[mf.name] = entry
        self._by_cluster.setdefault(cluster, {})[mf.name] = None
        self._remember(entry)
        if self.on_add is not None:
            self.on_add(entry)
        return entry

    def _remember(self, entry: FileEntry) -> None:
        """Keep ``entry``'s numbers in the identity registry; say where it spilled."""
        mf = entry.mf
        indoms = {serial: si.serial for serial, si in entry.indoms.items()}
        key = (mf.name, mf.uid)
        self.registry.serve(
            key,
            entry.cluster,
            mf.header.cluster,
            mf.header.noprefix,
            indoms,
            entry.identity,
            entry.spills,
        )
        if entry.spill_clusters:
            self.info(f"{mf.path}: {spill.summary(len(entry.spilled), entry.spill_clusters)}")

    def _spill(self, entry: FileEntry, requested: Asked) -> None:
        """Give every spilled metric of ``entry`` its PMID (see the module rules): its
        remembered one, else a new one; sets :attr:`FileEntry.spills` (every remembered
        name, for the registry) and :attr:`FileEntry.spill_clusters` (reserved here)."""
        mf = entry.mf
        wanted = sorted(name for name, m in first_named(mf.metrics).items() if m.spill)
        known = self.registry.spills((mf.name, mf.uid), wanted)
        if not wanted and not known:
            return
        mine = {entry.cluster} | self.clusters.held_by.keys()  # another file's now: given up
        free_cluster = partial(self.clusters.hold_free, requested, mf.uid)  # held meanwhile

        def refuse(name: str) -> None:
            field = f"metric {self._stem(mf)}.{name}"
            self._refuse(entry, field, "no free spill cluster, metric not served")

        entry.spills, entry.spill_clusters = spill.place(wanted, known, mine, free_cluster, refuse)
        self.clusters.hold_spills(entry.spill_clusters, mf.uid, mf.name)

    def _refuse_file(self, why: Problem) -> FileEntry | None:
        """Log why a file is not served; returns None for ``add`` to return."""
        self.refusal = why
        self.log(str(why))
        return None

    def remove(self, name: str) -> FileEntry | None:
        """Stop serving the file called ``name``; returns its entry (still open) or None."""
        entry = self.files.pop(name, None)
        if entry is None:
            return None
        self._by_cluster.get(entry.cluster, {}).pop(name, None)  # (4,095 clusters at most)
        if self.on_remove is not None:  # before its descriptor is closed: its last counts
            self.on_remove(entry)
        freed = self.clusters.release(entry.cluster, entry.spill_clusters)
        for m in entry.metrics:
            self.release_metric(m)
        self.registry.depart((name, entry.mf.uid))
        released = [self.release_indom(entry.cluster, s, si) for s, si in entry.indoms.items()]
        for listener in self.freed_listeners if freed or any(released) else ():
            listener()
        return entry

    def _add_indoms(self, entry: FileEntry, wanted: set[int]) -> None:
        """Serve the indoms a metric of the file is over (:func:`used_indoms`); one no
        metric uses gets nothing, not even a PCP number (a client reaches an indom only
        through a metric's descriptor)."""
        mf = entry.mf
        for serial in used_indoms(mf):
            indom = mf.indoms[serial]
            pcp_serial = self.indom_serial(mf.name, entry.cluster, serial, wanted, mf.uid)
            if pcp_serial is None:
                entry.starved = True
                self._refuse(entry, f"indom serial {serial}", "no free PCP indom serial")
                continue
            si = ServedIndom(pcp_serial, indom, file=mf.name)
            si.labels, si.notes = merge_labels(mf.labels_for(layout.LABEL_INDOM, serial))
            if mf.label_index:  # the labelled instances only, not every instance
                for inst in indom.instances:
                    labels = mf.labels_for(layout.LABEL_INSTANCES, serial, inst.internal)
                    pair = merge_labels(labels) if labels else ("", "")
                    if pair != ("", ""):
                        si.instance_labels[inst.internal] = pair
            entry.indoms[serial] = si
            self.claim_indom(entry.cluster, serial, si)

    def _add_metrics(self, entry: FileEntry) -> None:
        mf = entry.mf
        stem = self._stem(mf)
        first = first_named(mf.metrics)
        for metric in mf.metrics:
            name = f"{stem}.{metric.name}"
            earlier = first[metric.name].offset  # spilled or not, the first entry wins
            cluster, item = entry.cluster, metric.item
            if metric.spill and earlier == metric.offset:
                pmid = entry.spills.get(metric.name)
                if pmid is None:
                    continue  # refused in _spill
                cluster, item = pmid
            shared = self.sources.get((cluster, item))
            if earlier != metric.offset:
                why: str | None = f"{name} is already the name of the metric at offset {earlier}"
            elif shared and not same_metric(shared[0], name, metric):
                why = f"item {metric.item} is {shared[0].name} in this cluster"
            else:
                why = None if shared else self.name_conflict(name, scope=mf.name.rpartition("/")[0])
            if why:
                self._refuse(entry, "metrics", f"{why}, metric not served", metric.offset)
                continue
            indom = None
            if metric.indom is not None:
                indom = entry.indoms.get(metric.indom)
                if indom is None:
                    self._refuse(entry, f"metric {name}", "its indom was not served")
                    continue
            served = served_metric(name, cluster, metric, indom)
            served.item = item  # a spilled metric's labels are still those of its own item
            served.file = mf.name
            served.labels, served.notes = merge_labels(
                mf.labels_for(layout.LABEL_ITEM, metric.item)
            )
            entry.metrics.append(served)
            self.claim_metric(served)

    def _refuse(self, entry: FileEntry, field: str, why: str, offset: int = -1) -> None:
        """Part of ``entry``'s file is not served: its ``field`` (at ``offset``), ``why``."""
        problem = Problem(path=entry.mf.path, field=field, message=why, offset=offset)
        entry.problems.append(problem)
        self.log(str(problem))
