"""The header and the TOC (mmv(5) "Header", "TOC"): a bad header or TOC refuses the whole
file; a TOC entry whose section is out of range or overlaps another is skipped."""

from __future__ import annotations

from pmda_mmv.mmvfile import layout, limits, loadcost
from pmda_mmv.mmvfile.errors import NotReady, Refused
from pmda_mmv.mmvfile.parse.state import State
from pmda_mmv.mmvfile.parsed import Header, Toc

H = layout.HEADER.at
"""Field offsets of the header (it is at offset 0)."""


def read_header(path: str, head: bytes, size: int) -> Header:
    """Validate the header in ``head`` (at least 40 bytes) of a file of ``size`` bytes, in the
    reference's order (mmv.c create_client_stat).

    Raises :class:`~.errors.Refused` (magic, version, TOC count or size, cluster) or
    :class:`~.errors.NotReady` (g1 is 0, or g1 != g2)."""
    magic, version, g1, g2, tocs, flags, process, cluster = layout.HEADER.unpack_from(head)
    if magic == b"\0\0\0\0" and g1 == 0:
        # libpcp_mmv sizes the file, then writes the header through a mapping: no event,
        # maybe no mtime change; retry it like any file in flux.
        raise NotReady(
            path=path, field="header.magic", offset=H["magic"], message="header not written yet"
        )
    if magic != layout.MAGIC:
        raise Refused(
            path=path,
            field="header.magic",
            offset=H["magic"],
            message=f"magic {magic!r} is not 'MMV\\0'",
        )
    if version not in layout.VERSIONS:
        raise Refused(
            path=path,
            field="header.version",
            offset=H["version"],
            message=f"version {version} unsupported",
        )
    if g1 == 0:
        raise NotReady(
            path=path, field="header.g1", offset=H["g1"], message="generation 0, no data yet"
        )
    if g1 != g2:
        raise NotReady(
            path=path,
            field="header.g2",
            offset=H["g2"],
            message=f"generation in flux, g1={g1} g2={g2}",
        )
    _check_tocs(path, tocs, size)
    if not 0 <= cluster <= limits.MAX_CLUSTER:
        why = f"cluster {cluster} out of range"
        raise Refused(
            path=path,
            field="header.cluster",
            offset=H["cluster"],
            message=why,
            limit=limits.MAX_CLUSTER,
        )
    return Header(version, g1, g2, tocs, flags, process, cluster)


def _check_tocs(path: str, tocs: int, size: int) -> None:
    if tocs < 2:
        why = f"{tocs} TOC entries, expecting at least 2"
        raise Refused(path=path, field="header.tocs", offset=H["tocs"], message=why, limit=2)
    if tocs > limits.MAX_TOCS:
        why = f"{tocs} TOC entries, more than {limits.MAX_TOCS}"
        raise Refused(
            path=path, field="header.tocs", offset=H["tocs"], message=why, limit=limits.MAX_TOCS
        )
    need = layout.HEADER_SIZE + tocs * layout.TOC_SIZE
    if need > size:
        limit = (size - layout.HEADER_SIZE) // layout.TOC_SIZE
        why = f"{tocs} TOC entries need {need} bytes, file has {size}"
        raise Refused(path=path, field="header.tocs", offset=H["tocs"], message=why, limit=limit)


def header(path: str, data: bytes) -> Header:
    """The validated header of the whole file ``data`` (raises as :func:`read_header`)."""
    return read_header(path, data, len(data))


def flags(st: State) -> None:
    """Note unknown header flag bits (ignored, as the C reference does)."""
    unknown = st.out.header.flags & ~layout.FLAGS_KNOWN
    if unknown:
        st.problem("header.flags", H["flags"], f"unknown flag bits {unknown:#x} ignored")


def tocs(st: State) -> list[Toc]:
    """Every TOC entry, in file order (the header checked that they fit)."""
    first, count = layout.HEADER_SIZE, st.out.header.tocs
    entries = layout.TOC.iter_unpack(st.data[first : first + count * layout.TOC_SIZE])
    return [
        Toc(i, ttype, tcount, offset, first + i * layout.TOC_SIZE)
        for i, (ttype, tcount, offset) in enumerate(entries)
    ]


_COUNT_LIMIT = {  # METRICS: only the per-file limit (check_entries), past 1023 they spill
    layout.TOC_INDOMS: limits.MAX_SERIAL,
    layout.TOC_LABELS: limits.MAX_LABELS,
}


def accept_section(st: State, toc: Toc) -> bool:
    """Range-check one TOC entry's section; record a problem and skip it when bad."""
    where = f"toc[{toc.index}]"
    if toc.type not in layout.TOC_NAMES:
        st.problem(f"{where}.type", toc.at, f"bad TOC type {toc.type:#x}")
        return False
    limit = _COUNT_LIMIT.get(toc.type)
    name = layout.TOC_NAMES[toc.type]
    if limit is not None and toc.count > limit:
        at = layout.TOC.offset(toc.at, "count")
        st.problem(f"{where}.count", at, f"{name} count {toc.count} > {limit}", limit)
        return False
    if toc.count == 0:
        return False
    esize = layout.ENTRY_SIZE[(toc.type, layout.entry_layout(st.version))]
    start, end = toc.offset, toc.offset + toc.count * esize
    first = layout.HEADER_SIZE + st.out.header.tocs * layout.TOC_SIZE
    at = layout.TOC.offset(toc.at, "offset")
    if start < first or end > st.size:
        why = f"{name} section [{start}, {end}) outside the data area [{first}, {st.size})"
        st.problem(f"{where}.offset", at, why, st.size)
        return False
    other = st.sections.overlapping(start, end)
    if other is not None:
        ostart, oend, prior = other
        why = f"{name} section [{start}, {end}) overlaps toc[{prior.index}] [{ostart}, {oend})"
        st.problem(f"{where}.offset", at, why)
        return False
    st.sections.add(start, end, toc)
    return True


def check_entries(st: State, sections: list[Toc]) -> None:
    """Refuse the file when its accepted sections hold more entries of one kind than
    :data:`~pmda_mmv.mmvfile.limits.MAX_ENTRIES` allows, named at the TOC entry whose count passes
    the limit, or when its entries together cost more than
    :data:`~pmda_mmv.mmvfile.loadcost.MAX_LOAD_COST` (one file must not cost one request more than
    about a second)."""
    totals: dict[int, int] = {}
    for toc in sections:
        limit = limits.MAX_ENTRIES.get(toc.type)
        if limit is None:
            continue
        totals[toc.type] = total = totals.get(toc.type, 0) + toc.count
        if total > limit:
            name = layout.TOC_NAMES[toc.type]
            why = f"{name} sections hold {total} entries, more than {limit} in one file"
            raise Refused(
                path=st.path,
                field=f"toc[{toc.index}].count",
                offset=layout.TOC.offset(toc.at, "count"),
                message=why,
                limit=limit,
            )
    cost = sum(loadcost.LOAD_COST[kind] * n for kind, n in totals.items())
    if cost > loadcost.MAX_LOAD_COST:
        counts = ", ".join(f"{n} {layout.TOC_NAMES[kind]}" for kind, n in sorted(totals.items()))
        why = (
            f"entries ({counts}) cost {cost:.0f} to load, more than {loadcost.MAX_LOAD_COST} "
            "in one file (loadcost.LOAD_COST: about a second of the agent's work at worst)"
        )
        raise Refused(
            path=st.path,
            field="toc",
            offset=layout.HEADER_SIZE,
            message=why,
            limit=loadcost.MAX_LOAD_COST,
        )
