"""What the catalogue serves: its records of served files, metrics and indoms, and the tables
that link each PMID and PCP indom serial to the files serving it.

Pure data with no PCP imports: the agent turns :class:`FileEntry` records into ``pcp.pmda``
metrics and indoms; :mod:`~.catalogue` makes them.
"""

from __future__ import annotations

import bisect
from collections.abc import Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Final, Protocol, TypeVar

from pmda_mmv.mmvfile import layout, pmunits
from pmda_mmv.mmvfile.errors import Problem
from pmda_mmv.mmvfile.parsed import Indom, Instance, Metric
from pmda_mmv.mmvfile.pcpdefs import PM_SEM_COUNTER, PM_TYPE_64
from pmda_mmv.mmvfile.reader import MmvFile

CONTROL_CLUSTER: Final = 0
REMEMBERED: Final = 10_000
"""Departed files whose cluster (and status instance id) are kept, so that a file coming
back under its name keeps its PMIDs; beyond this many the oldest are forgotten (a directory
of files named by PID would otherwise grow these tables by ~200 bytes per name, forever)."""

K = TypeVar("K")
V = TypeVar("V")


def remember(table: dict[K, V], key: K, value: V, present: Collection[K]) -> None:
    """``table[key] = value`` as its newest entry; once more than REMEMBERED (+1/8) keys
    in ``table`` are not ``present``, the oldest of those are dropped, down to REMEMBERED."""
    table.pop(key, None)
    table[key] = value
    if len(table) - len(present) > REMEMBERED * 9 // 8:
        departed = [n for n in table if n not in present]
        for old in departed[: len(departed) - REMEMBERED]:
            del table[old]


@dataclass(slots=True)
class ServedIndom:
    """One instance domain as served: PCP ``serial`` (domain added by the agent), the file's
    indom (instances, help), labels (JSON object text, "" when none), per-instance labels
    and ``keys`` (unsigned instance ids in the order of the value index; ``dense`` when
    they are 0..n-1)."""

    serial: int
    indom: Indom
    labels: str = ""
    notes: str = ""
    instance_labels: dict[int, tuple[str, str]] = field(default_factory=dict)
    keys: list[int] = field(default_factory=list)
    file: str = ""  # the file serving it
    dense: bool = False

    def __post_init__(self) -> None:
        # Instance ids in position order, as pmcd hands them to python3-pcp callbacks:
        # unsigned ("(iiI)"), so that an int32 id of -5 is 4294967291.
        self.keys = [i.internal & 0xFFFFFFFF for i in self.indom.instances]
        self.dense = self.keys == list(range(len(self.keys)))


@dataclass(slots=True)
class ServedMetric:
    """One metric as served: full ``name``, PMID (``cluster``, ``item``), PCP descriptor fields
    (``type`` PM_TYPE_*, ``semantics`` PM_SEM_*, ``units`` pmUnits word, ``indom`` PCP serial or
    None), help text, and labels/notes (JSON object text, "" when none)."""

    name: str
    cluster: int
    item: int
    type: int
    semantics: int
    units: int
    indom: ServedIndom | None
    metric: Metric
    labels: str = ""
    notes: str = ""
    file: str = ""  # the file serving it

    @property
    def oneline(self) -> str | None:
        """One-line help; None when the file has none (served as PM_ERR_TEXT)."""
        return self.metric.shorthelp

    @property
    def helptext(self) -> str | None:
        """Long help; None when the file has none (served as PM_ERR_TEXT)."""
        return self.metric.longhelp


@dataclass(slots=True)
class FileEntry:
    """One served file: its reader, assigned ``cluster``, served metrics and indoms (by the
    file's own serial), cluster labels, and the naming problems met while adding it."""

    mf: MmvFile
    cluster: int
    metrics: list[ServedMetric] = field(default_factory=list)
    indoms: dict[int, ServedIndom] = field(default_factory=dict)
    labels: str = ""
    notes: str = ""
    problems: list[Problem] = field(default_factory=list)
    starved: bool = False  # some indom got no PCP serial: retried when serials free up
    identity: str = ""  # why it is not served under the cluster it asked for ("" if it is)
    spills: dict[str, tuple[int, int]] = field(default_factory=dict)  # remembered, by name
    spill_clusters: list[int] = field(default_factory=list)  # in the order they were taken

    @property
    def name(self) -> str:
        return self.mf.name

    @property
    def clusters(self) -> list[int]:
        """Every cluster the file is served under: its own, then its spill clusters."""
        return [self.cluster, *self.spill_clusters]

    @property
    def spilled(self) -> list[ServedMetric]:
        """The metrics served under a spill cluster, in file order."""
        return [sm for sm in self.metrics if sm.metric.spill]


def merged_instances(sources: Iterable[ServedIndom]) -> list[Instance]:
    """The instances of one PCP indom over the files serving it (``sources``, in file-name
    order); an internal id met again keeps its first name (as the C agent merges them)."""
    seen: set[int] = set()
    merged = []
    for si in sources:
        for inst in si.indom.instances:
            if inst.internal not in seen:
                seen.add(inst.internal)
                merged.append(inst)
    return merged


def same_metric(served: ServedMetric, name: str, m: Metric) -> bool:
    """Whether metric entry ``m`` named ``name`` is the one ``served`` (another file's)."""
    o = served.metric
    return served.name == name and (o.type, o.semantics, o.dimension, o.indom) == (
        m.type,
        m.semantics,
        m.dimension,
        m.indom,
    )


class _FromFile(Protocol):
    file: str


F = TypeVar("F", bound=_FromFile)


def _by_file(x: _FromFile) -> str:
    return x.file


class Sources(Mapping[K, list[F]]):
    """Per key (a PMID, a PCP indom serial), the records of the files serving it, in
    file-name order: read as a list, kept as the record itself while one file serves the
    key (the common case: no list a name), as a list when several share it.  Written by
    :meth:`link` and :meth:`unlink` only (the catalogue's)."""

    __slots__ = ("_by",)

    def __init__(self) -> None:
        self._by: dict[K, F | list[F]] = {}

    def __getitem__(self, key: K) -> list[F]:
        got = self._by[key]
        return got if isinstance(got, list) else [got]

    def __iter__(self) -> Iterator[K]:
        return iter(self._by)

    def __len__(self) -> int:
        return len(self._by)

    def __contains__(self, key: object) -> bool:
        return key in self._by

    def link(self, key: K, item: F) -> None:
        """Add ``item`` at ``key``, in file-name order (one file per key): a binary search,
        not a sort, so N files sharing a key cost O(N log N) comparisons in all."""
        got = self._by.get(key)
        if got is None:
            self._by[key] = item
        elif isinstance(got, list):
            bisect.insort(got, item, key=_by_file)
        else:
            self._by[key] = sorted([got, item], key=_by_file)

    def unlink(self, key: K, item: F) -> bool:
        """Remove ``item`` from ``key``; True when other files still serve the key."""
        got = self._by.get(key)
        if got is None:
            return False
        if not isinstance(got, list):
            if got is not item:
                return True
            del self._by[key]
            return False
        at = bisect.bisect_left(got, item.file, key=_by_file)
        if at < len(got) and got[at] is item:
            del got[at]
        if len(got) == 1:
            self._by[key] = got[0]
        elif not got:
            del self._by[key]
        return bool(got)


def served_metric(name: str, cluster: int, m: Metric, indom: ServedIndom | None) -> ServedMetric:
    if m.type == layout.TYPE_ELAPSED:
        return ServedMetric(
            name, cluster, m.item, PM_TYPE_64, PM_SEM_COUNTER, pmunits.UNITS_ELAPSED, indom, m
        )
    sem = m.semantics or PM_SEM_COUNTER
    return ServedMetric(name, cluster, m.item, m.type, sem, m.dimension, indom, m)
