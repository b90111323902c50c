"""The parsed entries of one MMV file (mmv(5)): header, TOC, indoms with their
instances, metrics and labels, as plain dataclasses; no I/O, no validation."""

from __future__ import annotations

import time
from array import array
from dataclasses import dataclass, field

from pmda_mmv.mmvfile import generation, layout


@dataclass(frozen=True, slots=True)
class Header:
    """The 40-byte file header (mmv(5) "Header")."""

    version: int
    g1: int
    g2: int
    tocs: int
    flags: int
    process: int
    cluster: int

    @property
    def noprefix(self) -> bool:
        return bool(self.flags & layout.FLAG_NOPREFIX)

    @property
    def process_flag(self) -> bool:
        return bool(self.flags & layout.FLAG_PROCESS)

    @property
    def sentinel(self) -> bool:
        return bool(self.flags & layout.FLAG_SENTINEL)

    @property
    def created(self) -> float | None:
        """Creation time read from g1 (:func:`~.generation.generation_time`), in seconds since
        the epoch; None when g1 is no time (writers that count generations)."""
        return generation.generation_time(self.g1, time.time())


@dataclass(frozen=True, slots=True)
class Toc:
    """One TOC entry (mmv(5) "TOC"): section ``type``, entry ``count`` and section ``offset``;
    ``at`` is the offset of the TOC entry itself."""

    index: int
    type: int
    count: int
    offset: int
    at: int


@dataclass(slots=True)
class Instance:
    """One instance: internal id (int32) and external name; ``offset`` of its entry."""

    internal: int
    external: str
    offset: int


@dataclass(slots=True)
class Indom:
    """One instance domain of the file, keyed by its file-local ``serial``.

    ``positions`` maps internal id -> index in ``instances`` (the value index uses it)."""

    serial: int
    offset: int
    instances: list[Instance]
    shorthelp: str | None
    longhelp: str | None
    positions: dict[int, int] = field(default_factory=dict)


@dataclass(slots=True)
class Metric:
    """One metric entry.  ``indom`` is the file-local serial, or None when singular.

    ``index`` is the value index: for instance position p (see :attr:`Indom.positions`),
    the offset of the value entry relative to the snapshot base, or -1 when the file has
    no value for it; a singular metric's is that one offset (an int, not an array of
    one: a name costs 56 bytes less), an indom's an array by position (:attr:`slots`
    reads either as an array).

    ``spill`` says why the metric cannot have its own item in the file's cluster (its
    item is past 1023, or an earlier metric of the file has it: the C agent drops it),
    "" when it can; a spilled metric is served under a spill cluster of its file
    (:mod:`~.catalogue`, docs/spill.md)."""

    name: str
    item: int
    type: int
    semantics: int
    dimension: int
    indom: int | None
    shorthelp: str | None
    longhelp: str | None
    offset: int
    index: array[int] | int = -1
    stride: int = 0
    spill: str = ""

    @property
    def slots(self) -> array[int]:
        """The value index as an array by instance position (one slot when singular)."""
        index = self.index
        return array("q", (index,)) if isinstance(index, int) else index

    def slot(self, pos: int) -> int:
        """The value offset of instance position ``pos`` (-1: none)."""
        index = self.index
        return index if isinstance(index, int) else index[pos]

    def set_slot(self, pos: int, at: int) -> None:
        """Index the value entry at ``at`` (relative to the base) for position ``pos``."""
        if isinstance(self.index, int):
            self.index = at
        else:
            self.index[pos] = at

    @property
    def value_count(self) -> int:
        index = self.index
        if isinstance(index, int):
            return int(index >= 0)
        return sum(1 for s in index if s >= 0)

    def find_stride(self) -> None:
        """Set ``stride`` when every instance has a value and the value entries are evenly
        spaced and 8-byte aligned in the span (libpcp_mmv writes a metric's values in
        instance order), so that :meth:`MmvFile.column` can read them in one slice."""
        s = self.index
        if isinstance(s, int):
            self.stride = layout.VALUE_SIZE if s >= 0 and s % 8 == 0 else 0
            return
        if not s:
            self.stride = 0
            return
        step = s[1] - s[0] if len(s) > 1 else layout.VALUE_SIZE
        ok = step > 0 and step % 8 == 0 and s[0] % 8 == 0
        self.stride = step if ok and s == array("q", range(s[0], s[0] + len(s) * step, step)) else 0


@dataclass(slots=True)
class Label:
    """One label entry: ``kind`` is one of layout.LABEL_{INDOM,CLUSTER,ITEM,INSTANCES};
    ``identity`` a serial, cluster or item; ``internal`` an instance id or -1; ``payload``
    the JSON object text; ``optional`` the on-disk PM_LABEL_OPTIONAL bit."""

    kind: int
    identity: int
    internal: int
    payload: str
    optional: bool
    offset: int
