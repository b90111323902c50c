"""METRICS entries (mmv(5) "Metrics"): a metric whose name, type, semantics or indom is
not servable is skipped and recorded; the rest get an empty value index
(:attr:`~.parsed.Metric.index`) for the VALUES sections to fill.  A metric whose item the
C agent cannot serve (past 1023, or the item of an earlier metric of the file) is kept,
marked :attr:`~.entries.Metric.spill` with why: the catalogue serves it under a spill
cluster (docs/spill.md)."""

from __future__ import annotations

from array import array
from typing import Any

from pmda_mmv.mmvfile import layout, limits
from pmda_mmv.mmvfile.errors import Refused
from pmda_mmv.mmvfile.parse.state import State
from pmda_mmv.mmvfile.parse.strings import cstring, help_text, shared, shared_number, string
from pmda_mmv.mmvfile.parsed import Metric, Toc
from pmda_mmv.mmvfile.rules import name_problem


def metrics(st: State, toc: Toc) -> None:
    """Index one METRICS section."""
    entry = layout.METRIC_V1 if st.version == 1 else layout.METRIC_V2
    for i in range(toc.count):
        at = toc.offset + i * entry.size
        metric = _metric(st, entry, entry.unpack_from(st.data, at), at, f"metrics[{i}]")
        if metric is None:
            st.skipped_metrics.add(at)
            continue
        metric.spill = _spill(st, metric, i)
        st.items.add(metric.item)
        st.out.metrics.append(metric)
        st.metric_at[at] = metric


def _metric(
    st: State, entry: layout.Record, fields: tuple[Any, ...], at: int, where: str
) -> Metric | None:
    """One metric entry, or None (with the problem recorded) when it must be skipped."""
    raw, item, mtype, sem, dim, indom, short, long_ = fields
    if st.version == 1:
        name = cstring(raw)
        if name is None:
            why = f"name not NUL-terminated within {layout.NAME_SIZE} bytes"
            st.problem(f"{where}.name", at, why, layout.NAME_SIZE)
            return None
    else:
        text = string(st, raw, f"{where}.name", at, optional=False)
        if text is None:
            return None
        name = text
    indom &= 0xFFFFFFFF
    serial: int | None = None if indom in layout.INDOM_NONE else indom
    reported = st.rejected_indoms or serial in st.skipped_serials
    if serial is not None and serial not in st.out.indoms and reported:
        return None  # its indom (or their section) was reported
    skip = _problem(st, name, item, mtype, sem, serial)
    if skip is not None:
        fname, detail, limit = skip
        st.problem(f"{where}.{fname}", entry.offset(at, fname), detail, limit)
        return None
    short_at, long_at = entry.offset(at, "shorthelp"), entry.offset(at, "longhelp")
    shorthelp = help_text(st, short, f"{where}.shorthelp", short_at)
    longhelp = help_text(st, long_, f"{where}.longhelp", long_at)
    return Metric(
        shared(name),
        shared_number(item),
        mtype,
        sem,
        shared_number(dim),
        serial,
        None if shorthelp is None else shared(shorthelp),
        None if longhelp is None else shared(longhelp),
        shared_number(at),
    )


def _problem(
    st: State, name: str, item: int, mtype: int, sem: int, serial: int | None
) -> tuple[str, str, int | None] | None:
    """(field, why, limit) a metric entry is skipped, or None, checked in the order of
    its fields."""
    why = name_problem(name)
    if why is not None:
        return "name", f"metric name {name!r}: {why}", None
    if mtype not in layout.TYPE_NAMES:
        return "type", f"unknown type {mtype}", None
    if sem not in layout.SEMANTICS:
        return "semantics", f"unknown semantics {sem}", None
    if serial is not None and serial not in st.out.indoms:
        return "indom", f"indom serial {serial} is not defined in this file", None
    return None


def _spill(st: State, metric: Metric, index: int) -> str:
    """Why ``metric`` (entry ``index``) cannot have its own item in the file's cluster, as
    the C agent would not serve it ("" when it can: the item is then taken)."""
    item = metric.item
    if item > limits.MAX_ITEM:
        return f"item {item} > {limits.MAX_ITEM}"
    first = st.first.get(item)
    if first is not None:
        return f"duplicate item {item}: metrics[{first[0]}] {first[1]!r} has it"
    st.first[item] = (index, metric.name)
    return ""


def metric_slots(st: State) -> None:
    """Give every accepted metric an empty value index, one slot per instance."""
    indoms, room = st.out.indoms, limits.MAX_ENTRIES[layout.TOC_VALUES]
    for m in st.out.metrics:
        n = 1 if m.indom is None else len(indoms[m.indom].instances)
        room -= n
        if room < 0:
            why = f"metrics x instances past {limits.MAX_ENTRIES[layout.TOC_VALUES]} value slots"
            raise Refused(
                path=st.path,
                field="metric.indom",
                offset=m.offset,
                message=why,
                limit=limits.MAX_ENTRIES[layout.TOC_VALUES],
            )
        m.index = -1 if m.indom is None else array("q", [-1]) * n
