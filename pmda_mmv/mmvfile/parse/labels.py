"""LABELS entries (mmv(5) "Labels", version 3): each is one JSON object for a cluster, an
item, an indom or an instance of one; a label PCP would reject, or one for something the
file does not define, is skipped and recorded, and so is a whole label set that merges
into more labels than libpcp accepts."""

from __future__ import annotations

from pmda_mmv.mmvfile import layout
from pmda_mmv.mmvfile.parse.state import State
from pmda_mmv.mmvfile.parse.strings import cstring
from pmda_mmv.mmvfile.parsed import Label, Toc
from pmda_mmv.mmvfile.rules import label_problem, label_set_problem

L = layout.LABEL.at
"""Field offsets of a label entry."""


def labels(st: State, toc: Toc) -> None:
    """Check one LABELS section; accepted labels are appended in file order."""
    for i in range(toc.count):
        at = toc.offset + i * layout.LABEL.size
        where = f"labels[{i}]"
        flags, identity, internal, raw = layout.LABEL.unpack_from(st.data, at)
        kind = flags & ~layout.LABEL_OPTIONAL
        if kind not in layout.LABEL_KINDS:
            st.problem(f"{where}.flags", at + L["flags"], f"bad label flags {flags:#x}")
            continue
        payload = cstring(raw)
        if payload is None:
            why = f"payload not NUL-terminated within {layout.LABEL_PAYLOAD_SIZE} bytes"
            st.problem(f"{where}.payload", at + L["payload"], why, layout.LABEL_PAYLOAD_SIZE)
            continue
        bad = label_problem(payload)
        if bad:
            st.problem(f"{where}.payload", at + L["payload"], bad)
            continue
        bad = _target_problem(st, kind, identity, internal)
        if bad:
            st.problem(f"{where}.identity", at + L["identity"], bad)
            continue
        optional = bool(flags & layout.LABEL_OPTIONAL)
        st.out.labels.append(Label(kind, identity, internal, payload, optional, at))


def _target_problem(st: State, kind: int, identity: int, internal: int) -> str | None:
    """Why the label's target (cluster, item, indom or instance) is not this file's."""
    header = st.out.header
    if kind == layout.LABEL_CLUSTER:
        if identity == header.cluster:
            return None
        return f"cluster label for cluster {identity}, file asks for {header.cluster}"
    if kind == layout.LABEL_ITEM:
        return None if identity in st.items else f"item label for unknown item {identity}"
    indom = st.out.indoms.get(identity)
    if indom is None:
        return f"{layout.LABEL_KINDS[kind]} label for unknown indom serial {identity}"
    if kind == layout.LABEL_INSTANCES and internal not in indom.positions:
        return f"instance label for unknown instance {internal} of indom {identity}"
    return None


def index_labels(st: State) -> None:
    """Group the labels by the PCP label set they belong to
    (:meth:`~.reader.MmvFile.labels_for`) and drop, with one problem each, the sets that
    merge into more labels or more JSON than libpcp accepts (it would reject the whole
    set at every request)."""
    index = st.out.label_index
    for lb in st.out.labels:
        internal = lb.internal if lb.kind == layout.LABEL_INSTANCES else -1
        index.setdefault((lb.kind, lb.identity, internal), []).append(lb)
    if not index:
        return
    for key, group in list(index.items()):
        why = label_set_problem(group)
        if why is None:
            continue
        kind, identity, internal = key
        what = f"{layout.LABEL_KINDS[kind]} {identity}"
        what += f" instance {internal}" if kind == layout.LABEL_INSTANCES else ""
        st.problem("labels", group[0].offset, f"{len(group)} labels of {what}: {why}, not served")
        del index[key]
    kept = {id(lb) for group in index.values() for lb in group}
    st.out.labels = [lb for lb in st.out.labels if id(lb) in kept]
