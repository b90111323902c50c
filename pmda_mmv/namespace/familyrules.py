"""A family's state and its members' rules (docs/families.md): :class:`Family` (members,
left out, metrics, departed counts and their ledger) and the pure judgements on one member:
its metrics' definitions and whether they agree, what a departing member had counted."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Final

from pmda_mmv.mmvfile import layout, pmunits
from pmda_mmv.mmvfile.parsed import Indom, Instance, Metric
from pmda_mmv.mmvfile.pcpdefs import PM_IN_NULL, PM_SEM_COUNTER
from pmda_mmv.mmvfile.reader import MmvFile
from pmda_mmv.namespace.familyspec import FamilySpec
from pmda_mmv.namespace.registryfile import FAMILY, Key
from pmda_mmv.namespace.registrykept import Kept, KeptIndom, KeptMetric
from pmda_mmv.namespace.served import FileEntry, ServedIndom, ServedMetric, served_metric

Counts = dict[str, dict[int, float]]
Values = dict[int, Any] | list[Any]


Definition = tuple[int, int, int, int, tuple[tuple[int, str], ...] | None]
"""A metric as members must agree on it: item, type, semantics, units, instances."""


@dataclass(eq=False)
class Family:
    """One family's state: members, the members left out (file name -> why), the served
    metrics (by the members' metric name) and indoms (by file serial), departed counts."""

    spec: FamilySpec
    owner: int | None
    cluster: int = 0  # 0: not served (no member)
    members: dict[str, FileEntry] = field(default_factory=dict)
    left_out: dict[str, str] = field(default_factory=dict)
    defs: dict[str, tuple[Definition, str]] = field(default_factory=dict)  # and whose
    items: dict[int, str] = field(default_factory=dict)
    metrics: dict[str, ServedMetric] = field(default_factory=dict)
    indoms: dict[int, ServedIndom] = field(default_factory=dict)
    holders: dict[str, dict[str, ServedMetric]] = field(default_factory=dict)
    totals: Counts = field(default_factory=dict)
    seen: dict[str, dict[str, Values]] = field(default_factory=dict)  # last fetched counts
    recent: dict[tuple[str, int, int], Counts] = field(default_factory=dict)
    credited: dict[tuple[str, int, int], None] = field(default_factory=dict)  # the ledger
    gone: set[str] = field(default_factory=set)  # members credited, not yet unserved
    problems: list[str] = field(default_factory=list)

    lock: Any = None  # Families.lock

    @property
    def key(self) -> Key:
        return (self.spec.name, -1 if self.owner is None else self.owner, FAMILY)

    def saw(self, file: str, metric: str, values: Values) -> None:
        """A fetch read member ``file``'s counter ``metric`` as ``values``: what it had
        counted, should its file be gone when it leaves."""
        self.seen.setdefault(file, {})[metric] = values

    def mode(self, sm: ServedMetric) -> str:
        """How ``sm`` (a family metric) is aggregated."""
        if sm.metric.type == layout.TYPE_STRING:  # a string counter too: nothing to add
            return "mostrecent"
        if sm.semantics == PM_SEM_COUNTER:
            return "sum"
        return self.spec.mode_of(sm.metric.name)


def definition(sm: ServedMetric) -> Definition:
    insts = None
    if sm.indom is not None:
        insts = tuple((i.internal, i.external) for i in sm.indom.indom.instances)
    return (sm.metric.item, sm.metric.type, sm.semantics, sm.units, insts)


FIELDS: Final = ("item", "type", "semantics", "units", "instances")


def disagreement(fam: Family, entry: FileEntry) -> str | None:
    """Why ``entry`` does not agree with ``fam``'s members, or None."""
    for sm in entry.metrics:
        if sm.metric.spill:
            continue
        name, mine = sm.metric.name, definition(sm)
        known = fam.defs.get(name)
        if known is not None and known[0] != mine:
            theirs, whose = known
            at = next(i for i in range(len(FIELDS)) if mine[i] != theirs[i])
            return (
                f"metric {name}: {FIELDS[at]} {show(at, mine[at])}, the family's "
                f"is {show(at, theirs[at])} (as {whose})"
            )
        other = fam.items.get(mine[0])
        if other is not None and other != name:
            return f"metric {name}: item {mine[0]} is the family's {other}"
    return None


def show(at: int, value: Any) -> str:
    if FIELDS[at] == "type":
        return layout.TYPE_NAMES.get(value, str(value))
    if FIELDS[at] == "units":
        return f"{pmunits.format_units(value)!r}"
    if FIELDS[at] == "instances":
        return "[" + ", ".join(f"{i} {n!r}" for i, n in (value or ())) + "]"
    return str(value)


def counted(fam: Family) -> bool:
    """Whether ``fam``'s departed members counted anything (then it stays served)."""
    return any(any(row.values()) for row in fam.totals.values())


def disagrees(fam: Family, mf: MmvFile) -> bool:
    """Whether a departed file's counters disagree with the family's metrics (item,
    type, semantics, units, instances), as :func:`_disagreement` judges a served one."""
    for metric in mf.metrics:
        known = fam.defs.get(metric.name)
        if known is not None and not metric.spill and parsed_definition(mf, metric) != known[0]:
            return True
    return False


def parsed_definition(mf: MmvFile, metric: Metric) -> Definition:
    """A file's metric as :func:`_definition` gives a served one (ELAPSED: a counter)."""
    indom = mf.indoms.get(metric.indom) if metric.indom is not None else None
    insts = tuple((i.internal, i.external) for i in indom.instances) if indom else None
    if metric.type == layout.TYPE_ELAPSED:
        return (metric.item, metric.type, PM_SEM_COUNTER, pmunits.UNITS_ELAPSED, insts)
    sem = metric.semantics or PM_SEM_COUNTER
    return (metric.item, metric.type, sem, metric.dimension, insts)


def final_counts(fam: Family, entry: FileEntry, seen: dict[str, Values]) -> Counts:
    """What a departing member had counted: its file's last values (through the descriptor
    still open, even after the file was unlinked, while its generation is the one loaded),
    else the values the last fetch saw."""
    snap = entry.mf.last_snapshot()
    counts: Counts = {}
    for sm in entry.metrics:
        if sm.semantics != PM_SEM_COUNTER or sm.metric.name not in fam.metrics:
            continue
        keys = sm.indom.keys if sm.indom else [PM_IN_NULL]
        if snap is not None:
            pairs: Iterable[tuple[int, Any]] = zip(
                keys, entry.mf.column(snap, sm.metric), strict=False
            )
        else:
            old = seen.get(sm.metric.name, {})
            pairs = old.items() if isinstance(old, dict) else enumerate(old)
        row = {k: v for k, v in pairs if type(v) in (int, float)}
        if row:
            counts[sm.metric.name] = row
    return counts


def kept_of(fam: Family) -> Kept:
    """``fam``'s served metrics and indoms as its members' files defined them, to keep."""
    metrics = {}
    for name, fsm in fam.metrics.items():
        (item, mtype, sem, units, _), whose = fam.defs[name]
        m = fsm.metric
        metrics[name] = KeptMetric(item, mtype, sem, units, m.indom, whose, m.shorthelp, m.longhelp)
    indoms = {
        serial: KeptIndom(
            tuple((i.internal, i.external) for i in fsi.indom.instances),
            fsi.indom.shorthelp,
            fsi.indom.longhelp,
        )
        for serial, fsi in fam.indoms.items()
    }
    return Kept(metrics, indoms)


def kept_metrics(kept: Kept) -> list[tuple[ServedMetric, str]]:
    """The metrics ``kept`` describes, as the member that defined each one served it (and
    that member's name): what a family is served from with no member's file."""
    indoms = {
        serial: ServedIndom(
            0, Indom(serial, 0, [Instance(i, n, 0) for i, n in d.instances], d.oneline, d.helptext)
        )
        for serial, d in kept.indoms.items()
    }
    out = []
    for name, k in kept.metrics.items():
        m = Metric(name, k.item, k.type, k.semantics, k.units, k.indom, k.oneline, k.helptext, 0)
        si = indoms[k.indom] if k.indom is not None else None
        out.append((served_metric(name, 0, m, si), k.whose))
    return out
