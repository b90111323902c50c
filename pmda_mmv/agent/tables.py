"""The tables a fetch reads (:mod:`~.serving`): a PMID's table builder returns its values
and its other results (PCP error codes) by instance id, from this fetch's snapshots."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

from pmda_mmv.directory.filestate import FileState
from pmda_mmv.mmvfile.decode import MISSING, NO_VALUE, UNSUPPORTED, Snapshot
from pmda_mmv.mmvfile.pcpdefs import PM_ERR_AGAIN, PM_ERR_PMID, PM_ERR_VALUE, PM_IN_NULL
from pmda_mmv.namespace.served import FileEntry, ServedMetric

Values = dict[int, Any] | list[Any]
"""One metric's values in one fetch, by (unsigned) instance id: a list when the ids are
0..n-1.  Only plain values: anything else is in the table's second part."""
Built = tuple[Values, dict[int, Any]]
Table = Callable[[], "Built | None"]
"""A PMID's table builder: (values, other results) by instance id, or None when no file
serving it has a snapshot in this fetch (PM_ERR_AGAIN)."""

NO_VALUES: Final = None
"""An instance without a value: PMDA_FETCH_NOVALUE.  The client sees the same as for
PM_ERR_INST (the instance is left out), but libpcp_pmda >= 6.3 logs a warning for every
PM_ERR_INST of every fetch (40,000 instances without values: 9 MB of log per two fetches)."""
ERR_AGAIN: Final = [PM_ERR_AGAIN, 0]
ERR_PMID: Final = [PM_ERR_PMID, 0]
SPECIAL: Final = {NO_VALUE: NO_VALUES, UNSUPPORTED: [PM_ERR_VALUE, 0]}
"""Fetch results of the reader's markers: no value, an unreadable string."""
SINGULAR: Final = [PM_IN_NULL]
"""The instance ids of a singular metric (one list for all of them)."""


class FileTable:
    """The table builder of one file's metric (:meth:`Serving.file_table`): made for the
    fetch that asks for the metric (a PMID one file serves) or kept while the file serves
    it (a PMID files share), from the metric's instance ids (``SINGULAR`` for none)."""

    __slots__ = ("dense", "entry", "keys", "sm", "snaps")

    def __init__(self, sm: ServedMetric, entry: FileEntry, snaps: dict[str, Snapshot]) -> None:
        self.sm = sm
        self.entry = entry
        self.snaps = snaps
        self.keys = sm.indom.keys if sm.indom else SINGULAR
        self.dense = sm.indom.dense if sm.indom else False

    def __call__(self) -> Built | None:
        snap = self.snaps.get(self.entry.name)
        if snap is None:
            return None
        mf, metric, keys = self.entry.mf, self.sm.metric, self.keys
        values = mf.column(snap, metric)
        if mf.sliced(snap, metric):
            return (values if self.dense else dict(zip(keys, values, strict=True))), {}
        plain: dict[int, Any] = {}
        special: dict[int, Any] = {}
        for k, v in zip(keys, values, strict=True):
            if v is NO_VALUE or v is UNSUPPORTED:
                special[k] = SPECIAL[v]
            elif v is not MISSING:
                plain[k] = v
        return plain, special


def status_table(states: Mapping[str, FileState], read: Callable[[FileState], object]) -> Table:
    def status_table() -> Built:
        return {s.instance: read(s) for s in states.values()}, {}

    return status_table


def first_of(parts: list[Table]) -> Table:
    """The table of a PMID several files share: each instance from the first file (in name
    order) that has it; None (PM_ERR_AGAIN) only when no file has a snapshot."""

    def build() -> Built | None:
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
