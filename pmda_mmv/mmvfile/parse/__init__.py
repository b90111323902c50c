"""Validate one MMV file's bytes into its entries: :func:`parse`, pure (no I/O).

One module per on-disk concept, as pyelftools keeps one per ELF structure:
:mod:`.header` (header and TOC; their errors refuse the file), :mod:`.strings`,
:mod:`.indoms` (indoms and their instances), :mod:`.metrics`, :mod:`.values` and
:mod:`.labels`; :mod:`.state` holds the result and what the section parsers share, and
:mod:`.ranges` the overlap checks.  Sections are parsed in the order their references
need: indoms, metrics, values, labels.  Every field offset comes from the record layouts
of :mod:`pmda_mmv.mmvfile.layout`.
"""

from __future__ import annotations

from pmda_mmv.mmvfile import layout
from pmda_mmv.mmvfile.parse import header as _header
from pmda_mmv.mmvfile.parse.indoms import indoms
from pmda_mmv.mmvfile.parse.labels import index_labels, labels
from pmda_mmv.mmvfile.parse.metrics import metric_slots, metrics
from pmda_mmv.mmvfile.parse.state import Parsed, State
from pmda_mmv.mmvfile.parse.values import value_span, values
from pmda_mmv.mmvfile.parsed import Toc

__all__ = ["parse"]


def parse(data: bytes, path: str) -> Parsed:
    """Validate ``data``, the whole file at ``path`` (named in problems and errors).

    Raises :class:`~.errors.Refused` or :class:`~.errors.NotReady` for a bad header or
    TOC; a bad section or entry is skipped and recorded in :attr:`Parsed.problems`."""
    st = State(path, data, Parsed(_header.header(path, data)))
    _header.flags(st)
    st.out.toc = _header.tocs(st)
    by_type: dict[int, list[Toc]] = {}
    for toc in st.out.toc:
        if _header.accept_section(st, toc):
            by_type.setdefault(toc.type, []).append(toc)
            st.out.sections.append(toc)
        elif toc.type == layout.TOC_METRICS:
            st.rejected_metrics = True
        elif toc.type == layout.TOC_INDOMS:
            st.rejected_indoms = True
    _header.check_entries(st, st.out.sections)
    for toc in by_type.get(layout.TOC_INDOMS, ()):
        indoms(st, toc)
    for toc in by_type.get(layout.TOC_METRICS, ()):
        metrics(st, toc)
    metric_slots(st)
    value_span(st, by_type.get(layout.TOC_VALUES, []))
    for toc in by_type.get(layout.TOC_VALUES, ()):
        values(st, toc)
    for toc in by_type.get(layout.TOC_LABELS, ()):
        labels(st, toc)
    index_labels(st)
    for metric in st.out.metrics:
        metric.find_stride()
    return st.finish()
