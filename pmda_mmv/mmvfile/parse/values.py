"""VALUES entries (mmv(5) "Values"): each names its metric and instance entry by offset;
the accepted ones fill the metrics' value index (:attr:`~.parsed.Metric.index`, offsets
relative to the values span) and the rest are recorded."""

from __future__ import annotations

from array import array

from pmda_mmv.mmvfile import layout
from pmda_mmv.mmvfile.parse.state import State
from pmda_mmv.mmvfile.parse.strings import shared_number, string, string_ok
from pmda_mmv.mmvfile.parsed import Metric, Toc

V = layout.VALUE.at
"""Field offsets of a value entry."""
_WORD = 8  # the metric and instance fields are 8-byte words, read as one array each


def value_span(st: State, tocs: list[Toc]) -> None:
    """Base and length of the span holding every accepted VALUES section."""
    if tocs:
        st.out.base = min(t.offset for t in tocs)
        st.out.span = max(t.offset + t.count * layout.VALUE_SIZE for t in tocs) - st.out.base


def values(st: State, toc: Toc) -> None:
    """Index a VALUES section in one pass over its (metric, instance) offset pairs.
    An entry that is not plainly valid goes through :func:`value`, which checks it in
    full and records its problem.  A string value's string entry is checked once per
    distinct offset (:attr:`State.good_strings`), not once per value: a million values
    sharing one string cost what a million numbers do."""
    end = toc.offset + toc.count * layout.VALUE_SIZE
    words = memoryview(st.data)[toc.offset : end].cast("Q")  # native, as layout.VALUE
    metric_at, instance_at = st.metric_at, st.instance_at
    at, base, step = toc.offset, st.out.base, layout.VALUE_SIZE
    per = layout.VALUE_SIZE // _WORD  # 8-byte words per entry
    moffs = words[V["metric"] // _WORD :: per].tolist()
    ioffs = words[V["instance"] // _WORD :: per].tolist()
    extras = words[V["extra"] // _WORD :: per].tolist()  # unsigned: a negative one fails
    good, tried = st.good_strings, st.tried
    i, count = 0, len(moffs)
    while i < count:
        moff, ioff = moffs[i], ioffs[i]
        metric = metric_at.get(moff)
        if metric is None or metric.offset in tried:  # no call per value once tried
            run = 0
        else:
            run = _run(st, metric, moffs, ioffs, extras, i)
        if run and metric is not None:  # a whole metric, instance by instance, as libpcp_mmv
            metric.index = array("q", range(at - base, at - base + run * step, step))
            at += run * step
            i += run
            continue
        i += 1
        if metric is not None and (metric.type != layout.TYPE_STRING or extras[i - 1] in good):
            if metric.indom is None:
                pos = 0
            else:
                found = instance_at.get(ioff)
                pos = found[1] if found is not None and found[0].serial == metric.indom else -1
            if pos >= 0 and metric.slot(pos) < 0:
                metric.set_slot(pos, shared_number(at - base))
                at += step
                continue
        value(st, at, f"values[{i - 1}]")
        at += step


def _run(
    st: State, metric: Metric, moffs: list[int], ioffs: list[int], extras: list[int], i: int
) -> int:
    """How many values from ``i`` on are the whole of ``metric``, one per instance in
    its indom's order with none set before, and for a STRING metric each pointing at a
    good string entry (0 when they are not: checked one value at a time).  Tried once
    per metric, so a file cannot make it cost more than its size."""
    if metric.indom is None or metric.offset in st.tried:
        return 0
    st.tried.add(metric.offset)
    order = _instance_order(st, metric.indom)
    k = len(order)
    if not k or k != len(metric.slots) or ioffs[i : i + k] != order:
        return 0
    if moffs[i : i + k] != [moffs[i]] * k:
        return 0
    if metric.type == layout.TYPE_STRING and not _good_strings(st, extras[i : i + k]):
        return 0
    return k if metric.slots.count(-1) == k else 0


def _good_strings(st: State, offsets: list[int]) -> bool:
    """Whether every one of ``offsets`` is a good string entry, each distinct one checked
    once (and remembered in :attr:`State.good_strings`)."""
    good = st.good_strings
    for offset in set(offsets).difference(good):
        if not string_ok(st, offset):
            return False
        good.add(offset)
    return True


def _instance_order(st: State, serial: int) -> list[int]:
    """Entry offsets of indom ``serial``'s instances, by position."""
    if st.order is None:
        st.order = {}
        for off, (indom, pos) in st.instance_at.items():
            order = st.order.get(indom.serial)
            if order is None:  # not setdefault: its default would be built per instance
                order = st.order[indom.serial] = [-1] * len(indom.instances)
            order[pos] = off
    return st.order.get(serial, [])


def value(st: State, at: int, where: str) -> None:
    """Check one value entry in full; index it or record why not."""
    _, extra, moff, ioff = layout.VALUE.unpack_from(st.data, at)
    metric = st.metric_at.get(moff)
    if metric is None and (moff in st.skipped_metrics or st.rejected_metrics):
        return  # the metric entry or its section was reported
    if metric is None:
        why = f"offset {moff} is not an accepted metric entry"
        st.problem(f"{where}.metric", at + V["metric"], why)
        return
    if metric.indom is None:
        pos = 0
    else:
        found = st.instance_at.get(ioff)
        if found is None and (ioff in st.skipped_instances or st.rejected_indoms):
            return  # the instance entry or its section was reported
        if found is None or found[0].serial != metric.indom:
            why = f"offset {ioff} is not an instance of indom {metric.indom} (metric {metric.name})"
            st.problem(f"{where}.instance", at + V["instance"], why)
            return
        pos = found[1]
    if metric.slot(pos) >= 0:
        st.problem(f"{where}", at, f"duplicate value for metric {metric.name}, ignored")
        return
    extra_at = at + V["extra"]
    if metric.type == layout.TYPE_STRING and extra not in st.good_strings:
        if string(st, extra, f"{where}.extra", extra_at, False) is None:
            return
        st.good_strings.add(extra)
    metric.set_slot(pos, shared_number(at - st.out.base))
