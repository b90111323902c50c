"""Values of an MMV file: a :class:`Snapshot` (one consistent copy of the values span) and
the decoders that read a metric's values from it, with the markers for what a value
entry cannot give (:data:`NO_VALUE`, :data:`UNSUPPORTED`, :data:`MISSING`)."""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Final

from pmda_mmv.mmvfile import layout
from pmda_mmv.mmvfile.parsed import Metric

INT64_MIN: Final = -(1 << 63)
INT64_MAX: Final = (1 << 63) - 1

ReadString = Callable[[int], "str | None"]
"""The live string entry at an offset (:meth:`~.reader.MmvFile.read_string`)."""
ReadStrings = Callable[["Snapshot", "Iterable[int]"], None]
"""Read the live string entries at some offsets into the snapshot's
:attr:`Snapshot.strings`, in a few reads (:meth:`~.reader.MmvFile.read_strings`)."""
Decoder = Callable[["Snapshot", int], object]


@dataclass(slots=True)
class Snapshot:
    """One consistent copy of a file's values span, taken per request.

    ``data`` holds the bytes from the file's first to its last value entry; value offsets
    in :attr:`Metric.slots` index into it.  ``sentinel`` is the live SENTINEL flag and
    ``now_us`` the time of the copy in microseconds (for ELAPSED); ``strings`` the string
    entries read for this snapshot, by offset (None: out of bounds or not terminated), so
    that each is read once per snapshot however many values refer to it."""

    data: bytes
    sentinel: bool
    now_us: float
    strings: dict[int, str | None] = field(default_factory=dict)


class _Absent:
    """Marker values returned by decoders."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


NO_VALUE: Final = _Absent("NO_VALUE")
"""The SENTINEL flag marks this value as absent."""
UNSUPPORTED: Final = _Absent("UNSUPPORTED")
"""The metric's type is NOSUPPORT: the writer has no value to give."""
MISSING: Final = _Absent("MISSING")
"""The file has no value entry for this instance of the metric."""

_CAST: Final = {
    layout.TYPE_I32: "i",
    layout.TYPE_U32: "I",
    layout.TYPE_I64: "q",
    layout.TYPE_U64: "Q",
    layout.TYPE_FLOAT: "f",
    layout.TYPE_DOUBLE: "d",
}
"""memoryview formats of the numeric types read in bulk (native, first bytes of the union)."""
_ONE: Final = {mtype: struct.Struct(code).unpack_from for mtype, code in _CAST.items()}
"""The same formats, one value at a time: a singular metric's slice of one."""


def decoder(mtype: int, read_string: ReadString) -> Decoder:
    """A function ``(snapshot, slot) -> value`` for metrics of ``mtype``: int, float or
    str, :data:`NO_VALUE` when the SENTINEL flag marks it absent, or :data:`UNSUPPORTED`
    for NOSUPPORT (and any type this reader does not serve); STRING values are read
    through ``read_string``."""
    if mtype == layout.TYPE_STRING:
        return _string_decoder(read_string)
    if mtype == layout.TYPE_ELAPSED:
        return _elapsed_decoder()
    if mtype in (layout.TYPE_FLOAT, layout.TYPE_DOUBLE):
        return _real_decoder(mtype)
    if mtype in layout.VALUE_FORMAT:
        return _integer_decoder(mtype)
    return _unsupported


def _string_decoder(read_string: ReadString) -> Decoder:
    extra = layout.VALUE_EXTRA.unpack_from

    def string(snap: Snapshot, slot: int) -> object:
        text = read_string(extra(snap.data, slot + layout.EXTRA_OFFSET)[0])
        if text is None:
            return UNSUPPORTED
        return NO_VALUE if snap.sentinel and not text else text

    return string


def _elapsed_decoder() -> Decoder:
    pair, unpack_us = (
        layout.VALUE.unpack_from,
        layout.VALUE_FORMAT[layout.TYPE_ELAPSED].unpack_from,
    )

    def elapsed(snap: Snapshot, slot: int) -> object:
        raw, ext, _, _ = pair(snap.data, slot)
        if snap.sentinel and raw == layout.SENTINEL_BYTES:
            return NO_VALUE
        value: int = unpack_us(raw)[0]
        if ext < 0:
            value += int(snap.now_us + ext)
        return value if INT64_MIN <= value <= INT64_MAX else UNSUPPORTED

    return elapsed


def _real_decoder(mtype: int) -> Decoder:
    unpack_real = layout.VALUE_FORMAT[mtype].unpack_from

    def real(snap: Snapshot, slot: int) -> object:
        v: float = unpack_real(snap.data, slot)[0]
        return NO_VALUE if snap.sentinel and v != v else v

    return real


def _integer_decoder(mtype: int) -> Decoder:
    unpack_int = layout.VALUE_FORMAT[mtype].unpack_from
    data8 = layout.VALUE_FORMAT[layout.TYPE_U64].unpack_from
    all_ones = (1 << 64) - 1

    def integer(snap: Snapshot, slot: int) -> object:
        if snap.sentinel and data8(snap.data, slot)[0] == all_ones:
            return NO_VALUE
        return unpack_int(snap.data, slot)[0]

    return integer


def _unsupported(snap: Snapshot, slot: int) -> object:
    return UNSUPPORTED


def sliced(snap: Snapshot, metric: Metric) -> bool:
    """Whether :func:`column` reads ``metric`` in one slice of ``snap``: then its values
    are all plain numbers (no marker)."""
    return (
        metric.type in _CAST and not snap.sentinel and metric.stride > 0 and not len(snap.data) % 8
    )


def column(
    snap: Snapshot, metric: Metric, read_string: ReadString, read_strings: ReadStrings | None = None
) -> list[object]:
    """The values of ``metric`` in ``snap``, by instance position (one for a singular
    metric): int, float or str, :data:`NO_VALUE`, :data:`UNSUPPORTED`, or
    :data:`MISSING` where the file has no value entry.  Numeric metrics whose value
    entries are evenly spaced are read with one slice of the snapshot; with
    ``read_strings``, the string entries a STRING metric refers to are read in bulk first
    (into :attr:`Snapshot.strings`), not one read per value."""
    if metric.type == layout.TYPE_STRING and read_strings is not None:
        extra, at = layout.VALUE_EXTRA.unpack_from, layout.EXTRA_OFFSET
        read_strings(snap, {extra(snap.data, s + at)[0] for s in metric.slots if s >= 0})
        read_string = snap.strings.__getitem__
    if not sliced(snap, metric):
        decode = decoder(metric.type, read_string)
        return [decode(snap, s) if s >= 0 else MISSING for s in metric.slots]
    one = metric.index
    if isinstance(one, int):
        return [_ONE[metric.type](snap.data, one)[0]]
    view = memoryview(snap.data).cast(_CAST[metric.type])  # type: ignore[call-overload]
    first, step = one[0] // view.itemsize, metric.stride // view.itemsize
    values: list[object] = view[first : first + step * len(one) : step].tolist()
    return values
