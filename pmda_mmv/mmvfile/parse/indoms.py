"""INDOMS and INSTANCES entries (mmv(5) "Instance domains", "Instances"): each indom
claims a run of instance entries, which point back at it; an indom whose run is out of
range or overlaps another's, and an instance that is malformed or repeats an id or a
name, is skipped and recorded."""

from __future__ import annotations

from pmda_mmv.mmvfile import layout, limits
from pmda_mmv.mmvfile.parse.state import State
from pmda_mmv.mmvfile.parse.strings import cstring, help_text, string
from pmda_mmv.mmvfile.parsed import Indom, Instance, Toc

D = layout.INDOM.at
"""Field offsets of an indom entry."""
_NO_INSTANCES: list[Instance] = []
_NO_POSITIONS: dict[int, int] = {}
"""The instance list and positions every indom of no instances shares, read only (2,047
such indoms in each of 200 files would otherwise hold a list and a dict each)."""


def indoms(st: State, toc: Toc) -> None:
    """Index one INDOMS section, with the instances of each accepted indom."""
    isize = layout.ENTRY_SIZE[(layout.TOC_INSTANCES, layout.entry_layout(st.version))]
    for i in range(toc.count):
        at = toc.offset + i * layout.INDOM.size
        serial, count, offset, short, long_ = layout.INDOM.unpack_from(st.data, at)
        indom = _indom(st, i, at, serial, count * isize, offset)
        if indom is None:
            continue
        where = f"indoms[{i}]"
        indom.shorthelp = help_text(st, short, f"{where}.shorthelp", at + D["shorthelp"])
        indom.longhelp = help_text(st, long_, f"{where}.longhelp", at + D["longhelp"])
        for k in range(count):
            if not instance(st, indom, offset + k * isize, f"{where}.instances[{k}]"):
                st.skipped_instances.add(offset + k * isize)
        st.out.indoms[serial] = indom


def _indom(st: State, i: int, at: int, serial: int, length: int, offset: int) -> Indom | None:
    """The indom entry ``i`` at ``at`` with its instances' ``length`` bytes at ``offset``,
    or None (problem recorded) when it is skipped."""
    where = f"indoms[{i}]"
    if serial > limits.MAX_SERIAL:
        why = f"serial {serial} > {limits.MAX_SERIAL}"
        st.problem(f"{where}.serial", at + D["serial"], why, limits.MAX_SERIAL)
        st.skipped_serials.add(serial)
        return None
    if serial in st.out.indoms:
        st.problem(f"{where}.serial", at + D["serial"], f"duplicate serial {serial}, ignored")
        return None
    end = offset + length
    if length and (offset < layout.HEADER_SIZE or end > st.size):
        why = f"instances [{offset}, {end}) outside the file"
        st.problem(f"{where}.offset", at + D["offset"], why, st.size)
        st.skipped_serials.add(serial)
        return None
    other = st.claimed.overlapping(offset, end) if length else None
    if other is not None:  # each instance entry is checked once, for one indom
        ostart, oend, j = other
        why = f"instances [{offset}, {end}) overlap those of indoms[{j}] [{ostart}, {oend})"
        st.problem(f"{where}.offset", at + D["offset"], why)
        st.skipped_serials.add(serial)
        return None
    if not length:  # shared, never added to: instance() is called count (0) times
        return Indom(serial, at, _NO_INSTANCES, None, None, _NO_POSITIONS)
    st.claimed.add(offset, end, i)
    return Indom(serial, at, [], None, None)


def instance(st: State, indom: Indom, at: int, where: str) -> bool:
    """Add one instance entry to ``indom``; False (problem recorded) when skipped."""
    entry = layout.INSTANCE_V1 if st.version == 1 else layout.INSTANCE_V2
    field = entry.at
    if st.version == 1:
        back, internal, raw = entry.unpack_from(st.data, at)
        external = cstring(raw, "surrogateescape")
        if external is None:
            why = f"name not NUL-terminated within {layout.NAME_SIZE} bytes"
            st.problem(f"{where}.external", at + field["external"], why, layout.NAME_SIZE)
            return False
    else:
        back, internal, soff = entry.unpack_from(st.data, at)
        external = string(
            st, soff, f"{where}.external", at + field["external"], False, "surrogateescape"
        )
        if external is None:
            return False
    skip = _instance_problem(st, indom, back, internal, external)
    if skip is not None:
        name, message = skip
        st.problem(f"{where}.{name}", at + field[name], message)
        return False
    st.names[indom.offset].add(external)
    indom.positions[internal] = len(indom.instances)
    indom.instances.append(Instance(internal, external, at))
    st.instance_at[at] = (indom, indom.positions[internal])
    return True


def _instance_problem(
    st: State, indom: Indom, back: int, internal: int, external: str
) -> tuple[str, str] | None:
    """(field, why) an instance entry is skipped, or None."""
    if back != indom.offset:
        return "indom", f"back-reference {back} is not its indom entry at {indom.offset}, ignored"
    if not external:
        return "external", "empty instance name"
    if internal in indom.positions:
        return "internal", f"duplicate instance id {internal}"
    if external in st.names.setdefault(indom.offset, set()):
        return "external", f"duplicate instance name {external!r}"
    return None
