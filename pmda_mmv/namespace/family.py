"""Families: the files of one multi-process application served as one tree.

``pmda-mmv pmda --family NAME=GLOB`` makes the served files whose names match ``GLOB``
(fnmatch, the file name only) *members* of family ``NAME``, served once more as
``<prefix>.NAME.<metric>``: each metric once, with its own instances, its value aggregated
over the members (serving side: :mod:`~.aggregate`).  The members' files stay served under
their own names too: that is the per-member breakdown.  Rules (docs/families.md):

* **One owner.**  A family takes the files of one owner (uid): ``:owner=USER`` in the
  option, else the owner remembered for the family in the identity registry, else the
  owner of its first member.  A matching file of another owner is left out, with the reason.
* **Agreement.**  Every member's metric of a name has the same item, type, semantics, units
  and instances (ids and names) as the family's; a member with any metric that does not, or
  one naming another metric at an item of the family's, is left out, with the reason.
* **Counters** are the sum over the live members plus what departed members had counted
  when they left (read from the departing file's last values; kept in the identity
  registry under the family's key, ``(NAME, owner, "family")``, so an agent restart loses
  nothing).  A member
  restarted under its file name with a new generation is a departed member plus a new one;
  one that comes back with the same generation (a reload) is not counted twice.
* **Instant and discrete** metrics: ``:mode=sum`` (default), ``min``, ``max`` or
  ``mostrecent`` (the most recently started member's value), per family or per metric
  (``:mode.METRIC=MODE``), over live members only.  Strings are always ``mostrecent``.
* **Identity.**  The family's cluster and indom serials are the registry's for its key:
  they never move as members come and go.  The family is served while it has a member
  or has counted anything, also from an agent's start with no member's file: its
  descriptors are kept with its counts (:mod:`~.registrykept`).
"""

from __future__ import annotations

import fnmatch
import math
import threading
from collections.abc import Iterable
from typing import Final

from pmda_mmv.mmvfile import layout
from pmda_mmv.mmvfile.decode import Snapshot
from pmda_mmv.mmvfile.pcpdefs import PM_IN_NULL, PM_SEM_COUNTER, Log
from pmda_mmv.mmvfile.reader import MmvFile
from pmda_mmv.mmvfile.rules import printable
from pmda_mmv.namespace.catalogue import Catalogue
from pmda_mmv.namespace.familyrules import (
    Counts,
    Family,
    counted,
    definition,
    disagreement,
    disagrees,
    final_counts,
    kept_metrics,
    kept_of,
    parsed_definition,
)
from pmda_mmv.namespace.familyspec import FamilySpec
from pmda_mmv.namespace.registryfile import FAMILY
from pmda_mmv.namespace.registrykept import KEPT_BYTES, bounded
from pmda_mmv.namespace.served import FileEntry, ServedIndom, ServedMetric

PROMOTE: Final = {layout.TYPE_I32: layout.TYPE_I64, layout.TYPE_U32: layout.TYPE_U64}
"""Summed 32-bit metrics are served as 64-bit: 200 members' sum overflows 32 bits."""
RECENT: Final = 1024
"""Departed members whose credited counts are kept, to be taken back when the same
file (name and generation) is served again (a reload, not a restart)."""
LEDGER: Final = 4096
"""Departed members (name and generation) whose counts a family remembers having
credited, kept with its counts: a file left behind is not credited again."""


class Families:
    """Every ``--family`` of the agent over one :class:`Catalogue`, told of each file it
    serves and unserves; :meth:`take` says which PMIDs and indoms changed since."""

    def __init__(
        self, catalogue: Catalogue, specs: Iterable[FamilySpec], log: Log | None = None
    ) -> None:
        self.catalogue = catalogue
        sink: Log = log or (lambda line: None)
        self.log: Log = lambda line: sink(printable(line))  # names come from the files
        self.families = [
            Family(s, s.owner if s.owner is not None else self._remembered(s.name)) for s in specs
        ]
        self.lock = threading.RLock()
        """Held around every change of the families' counts and every registry save, by the
        agent's thread (its requests) and the departures thread (directory/departures.py)."""
        for fam in self.families:
            fam.lock = self.lock
            record = catalogue.registry.get(fam.key)
            if record is not None:
                fam.totals = {m: dict(t) for m, t in record.totals.items()}
                fam.credited = dict.fromkeys(record.credited)
        self.by_cluster: dict[int, Family] = {}
        self.of_file: dict[str, Family] = {}
        self.pmids: set[tuple[int, int]] = set()
        self.serials: set[int] = set()
        for fam in self.families:  # no file takes a family's names, even before it is served
            catalogue.reserve_tree(fam.spec.name)
        self.restore()
        if self.families:
            catalogue.watch(self.join, self.leave)

    def _remembered(self, name: str) -> int | None:
        """The owner the registry remembers family ``name`` for (its newest record)."""
        owners = [k[1] for k in self.catalogue.registry.records if k == (name, k[1], FAMILY)]
        return owners[-1] if owners and owners[-1] >= 0 else None

    @property
    def changed(self) -> bool:
        """Whether family PMIDs or indom serials changed since the last :meth:`take`."""
        return bool(self.pmids or self.serials)

    def take(self) -> tuple[set[tuple[int, int]], set[int]]:
        """The family PMIDs and indom serials that changed since the last call."""
        taken = self.pmids, self.serials
        self.pmids, self.serials = set(), set()
        return taken

    def entries(self, cluster: int) -> list[FileEntry]:
        """The members of the family served as ``cluster`` (none: not a family's)."""
        fam = self.by_cluster.get(cluster)
        return list(fam.members.values()) if fam else []

    def status(self, name: str) -> tuple[str, str] | None:
        """For ``check``: (family, "" for a member or why it is left out), or None."""
        fam = self.of_file.get(name)
        if fam is None:
            return None
        return fam.spec.name, fam.left_out.get(name, "")

    # -- members

    def join(self, entry: FileEntry) -> None:
        """A file is served: it joins the family its name matches, or is left out."""
        if "/" in entry.name:  # a container's file (--containers): never in a host family
            return
        fam = self.family_of(entry.name)
        if fam is None:
            return
        self.of_file[entry.name] = fam
        uid = entry.mf.uid
        if fam.owner is None:
            fam.owner = uid
        if uid != fam.owner:
            return self._leave_out(
                fam, entry, f"owned by uid {uid}: the family takes only uid {fam.owner}'s files"
            )
        why = disagreement(fam, entry)
        if why is None and not fam.cluster and not self._serve(fam):
            why = "no free cluster for the family"
        if why is not None:
            return self._leave_out(fam, entry, why)
        fam.members[entry.name] = entry
        metrics = [sm for sm in entry.metrics if not sm.metric.spill]
        added = self._define(fam, [(sm, entry.name) for sm in metrics])
        for sm in metrics:
            fam.holders.setdefault(sm.metric.name, {})[entry.name] = sm
        self._uncredit(fam, entry)
        indoms = {s: si.serial for s, si in fam.indoms.items()}
        self.catalogue.registry.serve(fam.key, fam.cluster, 0, False, indoms)  # saved if new
        if added:
            self._keep(fam)
        return None

    def _define(self, fam: Family, metrics: list[tuple[ServedMetric, str]]) -> bool:
        """``fam``'s metrics as ``metrics`` define them (each with the member whose it is),
        those it has not yet served added; whether any was."""
        served = len(fam.metrics)
        for sm, whose in metrics:
            defn = definition(sm)
            fam.defs.setdefault(sm.metric.name, (defn, whose))
            fam.items.setdefault(defn[0], sm.metric.name)
            if sm.metric.name not in fam.metrics:
                self._add_metric(fam, sm)
        return len(fam.metrics) != served

    def _keep(self, fam: Family) -> None:
        """``fam``'s descriptors kept with its counts in the registry (bounded), to serve it
        after an agent restart before any member's file is."""
        registry = self.catalogue.registry
        kept = bounded(kept_of(fam), min(KEPT_BYTES, registry.byte_cap // 8))
        if not kept:
            self.log(f"family {fam.spec.name}: its descriptors are too large to keep")
        registry.credit(fam.key, fam.totals, list(fam.credited), kept)

    def restore(self) -> None:
        """Each family not served that has counted anything is served as the registry keeps
        its descriptors (its numbers its own), with no member's file: at start, and at each
        request (the agent's thread) once a departure credited its first counts."""
        for fam in self.families:
            if not fam.cluster and counted(fam):
                self._restore(fam)

    def _restore(self, fam: Family) -> None:
        record = self.catalogue.registry.get(fam.key)
        if record is None or not record.kept or not self._serve(fam):
            return
        self._define(fam, kept_metrics(record.kept))
        indoms = {s: si.serial for s, si in fam.indoms.items()}
        self.catalogue.registry.serve(fam.key, fam.cluster, 0, False, indoms)

    def _leave_out(self, fam: Family, entry: FileEntry, why: str) -> None:
        fam.left_out[entry.name] = why
        self.log(f"{entry.mf.path}: not in family {fam.spec.name}: {why}")

    def leave(self, entry: FileEntry) -> None:
        """A file is no longer served: a member's counts are credited to its family."""
        fam = self.of_file.pop(entry.name, None)
        if fam is None or fam.left_out.pop(entry.name, None) is not None:
            return
        if fam.members.get(entry.name) is not entry:
            return
        del fam.members[entry.name]
        fam.gone.discard(entry.name)
        for holders in fam.holders.values():
            holders.pop(entry.name, None)
        seen = fam.seen.pop(entry.name, {})
        h = entry.mf.header
        key = (entry.name, h.g1, h.g2)
        if key not in fam.credited:  # else credited as it departed (departures.py)
            counts = self._finite(fam, entry.mf.path, final_counts(fam, entry, seen))
            self._add(fam, key, counts)
            fam.recent[key] = counts
            if len(fam.recent) > RECENT:
                del fam.recent[next(iter(fam.recent))]
        waiting = any(not why.startswith("owned by") for why in fam.left_out.values())
        if not fam.members and (waiting or not counted(fam)):  # else served: its counts
            self._unserve(fam)
            self._rejudge(fam)

    def _add(self, fam: Family, key: tuple[str, int, int], counts: Counts) -> None:
        """A departed member's ``counts`` join the family's, with ``key`` in its ledger; a
        sum that would not be finite (two doubles of 1.5e308) is not made (logged): the
        total stays what it was, finite, as the registry can keep it."""
        for metric, row in counts.items():
            total = fam.totals.setdefault(metric, {})
            for inst, v in row.items():
                summed = total.get(inst, 0) + v
                if isinstance(summed, float) and not math.isfinite(summed):
                    self.log(
                        f"family {fam.spec.name}: metric {metric}: {key[0]}'s count would "
                        "take the total past the largest double, not credited"
                    )
                    continue
                total[inst] = summed
        fam.credited[key] = None
        while len(fam.credited) > LEDGER:
            del fam.credited[next(iter(fam.credited))]
        self.catalogue.registry.credit(fam.key, fam.totals, list(fam.credited))

    def _finite(self, fam: Family, path: str, counts: Counts) -> Counts:
        """``counts`` without the values that are not finite (not credited, logged)."""
        for metric, row in counts.items():
            bad = [i for i, v in row.items() if not math.isfinite(v)]
            for inst in bad:
                del row[inst]
            if bad:
                self.log(
                    f"{path}: family {fam.spec.name}: metric {metric}: a value that is not "
                    "finite, not credited"
                )
        return {m: row for m, row in counts.items() if row}

    def credit_departed(self, mf: MmvFile, snap: Snapshot | None) -> bool:
        """A matching file departed (unlinked, replaced or its writer gone), seen by the
        departures thread with its last values ``snap``: credited to its family once (by
        name and generation), when it is the family owner's and agrees with its members.
        The caller holds :attr:`lock` and saves the registry."""
        fam = self.family_of(mf.name)
        h = mf.header
        key = (mf.name, h.g1, h.g2)
        if fam is None or snap is None or key in fam.credited:
            return False
        if fam.owner is None:
            fam.owner = mf.uid
        if mf.uid != fam.owner or disagrees(fam, mf):
            return False
        member = fam.members.get(mf.name)
        if member is not None and (member.mf.header.g1, member.mf.header.g2) == key[1:]:
            fam.seen.pop(mf.name, None)  # still served: no longer added as live
            fam.gone.add(mf.name)
        counts: Counts = {}
        for metric in mf.metrics:
            defn = parsed_definition(mf, metric)
            if defn[2] != PM_SEM_COUNTER or metric.type == layout.TYPE_STRING:
                continue
            if metric.spill or (fam.defs and metric.name not in fam.defs):
                continue
            keys = [i & 0xFFFFFFFF for i, _ in defn[4]] if defn[4] is not None else [PM_IN_NULL]
            pairs = zip(keys, mf.column(snap, metric), strict=False)
            row = {k: v for k, v in pairs if isinstance(v, int | float)}
            if row:
                counts[metric.name] = row
        self._add(fam, key, self._finite(fam, mf.path, counts))
        return True

    def family_of(self, name: str) -> Family | None:
        """The family whose pattern file ``name`` matches first (a container's: none)."""
        if "/" in name:
            return None
        return next((f for f in self.families if fnmatch.fnmatchcase(name, f.spec.glob)), None)

    def _rejudge(self, fam: Family) -> None:
        """The last member left: the files left out for disagreeing with the members are
        judged again (a rolling upgrade's new files, left out while old ones were served)."""
        for name, why in list(fam.left_out.items()):
            entry = self.catalogue.files.get(name)
            if entry is not None and not why.startswith("owned by"):
                del fam.left_out[name]
                self.join(entry)

    def _uncredit(self, fam: Family, entry: FileEntry) -> None:
        """The same file (name and generation) served again: its credit is taken back."""
        h = entry.mf.header
        counts = fam.recent.pop((entry.name, h.g1, h.g2), None)
        if counts is None:
            return
        for metric, row in counts.items():
            total = fam.totals.get(metric, {})
            for inst, v in row.items():
                total[inst] = total.get(inst, 0) - v
        fam.credited.pop((entry.name, h.g1, h.g2), None)
        self.catalogue.registry.credit(fam.key, fam.totals, list(fam.credited))

    # -- the family's numbers and names

    def _serve(self, fam: Family) -> bool:
        """Give ``fam`` its cluster (the registry's, else a free one) and departed counts."""
        cat = self.catalogue
        record = cat.registry.get(fam.key)
        own = (
            record.cluster
            if record is not None and record.cluster not in cat.clusters.held_by
            else None
        )
        owner = fam.owner if fam.owner is not None else 0
        cluster = cat.take_cluster(own, owner, fam.key[0])
        if cluster is None:
            return False
        fam.cluster = cluster
        if record is not None:
            fam.totals = {m: dict(t) for m, t in record.totals.items()}
            fam.credited = dict.fromkeys(record.credited)
        self.by_cluster[cluster] = fam
        return True

    def _add_metric(self, fam: Family, sm: ServedMetric) -> None:
        cat, name = self.catalogue, sm.metric.name
        full = f"{cat.prefix}.{fam.spec.name}.{name}"
        why = cat.name_conflict(full, fam.spec.name)
        fsi = None
        if why is None and sm.indom is not None and sm.metric.indom is not None:
            fsi = self._indom(fam, sm.metric.indom, sm.indom)
            why = None if fsi is not None else "no free PCP indom serial"
        if why is not None:
            fam.problems.append(f"{full}: {why}, not served")
            self.log(f"family {fam.spec.name}: {full}: {why}, not served")
            return
        counter = sm.semantics == PM_SEM_COUNTER
        summed = counter or fam.spec.mode_of(name) == "sum"
        mtype = PROMOTE.get(sm.type, sm.type) if summed else sm.type
        item = sm.metric.item
        fsm = ServedMetric(full, fam.cluster, item, mtype, sm.semantics, sm.units, fsi, sm.metric)
        fsm.file = fam.key[0]
        fam.metrics[name] = fsm
        cat.claim_metric(fsm)
        self.pmids.add((fam.cluster, item))

    def _indom(self, fam: Family, serial: int, si: ServedIndom) -> ServedIndom | None:
        fsi = fam.indoms.get(serial)
        if fsi is not None:
            return fsi
        cat = self.catalogue
        owner = fam.owner if fam.owner is not None else 0
        number = cat.indom_serial(fam.key[0], fam.cluster, serial, set(), owner)
        if number is None:
            return None
        fsi = ServedIndom(number, si.indom, file=fam.key[0])
        fam.indoms[serial] = fsi
        cat.claim_indom(fam.cluster, serial, fsi)
        self.serials.add(number)
        return fsi

    def _unserve(self, fam: Family) -> None:
        """The last member left: the family's names go (its numbers and counts stay)."""
        cat = self.catalogue
        for fsm in fam.metrics.values():
            cat.release_metric(fsm)
            self.pmids.add((fsm.cluster, fsm.item))
        for serial, fsi in fam.indoms.items():
            cat.release_indom(fam.cluster, serial, fsi)
            self.serials.add(fsi.serial)
        cat.release_cluster(fam.cluster)
        self.by_cluster.pop(fam.cluster, None)
        cat.registry.depart(fam.key)
        fam.cluster = 0
        for table in (fam.defs, fam.items, fam.metrics, fam.indoms, fam.holders):
            table.clear()
