"""pmUnits words (the MMV metric ``dimension`` field): their bit fields, their bytes, and
their text as ``pmUnitsStr(3)`` prints it, without libpcp."""

from __future__ import annotations

import struct
from typing import Final


def units_fields(word: int) -> tuple[int, int, int, int, int, int]:
    """Split a pmUnits word into (dimSpace, dimTime, dimCount, scaleSpace, scaleTime,
    scaleCount); dimensions and scaleCount are signed 4-bit fields (pmapi.h pmUnits)."""

    def signed4(v: int) -> int:
        return v - 16 if v & 0x8 else v

    return (
        signed4((word >> 28) & 0xF),
        signed4((word >> 24) & 0xF),
        signed4((word >> 20) & 0xF),
        (word >> 16) & 0xF,
        (word >> 12) & 0xF,
        signed4((word >> 8) & 0xF),
    )


def units_word(
    dim_space: int = 0,
    dim_time: int = 0,
    dim_count: int = 0,
    scale_space: int = 0,
    scale_time: int = 0,
    scale_count: int = 0,
) -> int:
    """Inverse of :func:`units_fields`: pack a pmUnits word."""
    return (
        (dim_space & 0xF) << 28
        | (dim_time & 0xF) << 24
        | (dim_count & 0xF) << 20
        | (scale_space & 0xF) << 16
        | (scale_time & 0xF) << 12
        | (scale_count & 0xF) << 8
    )


UNITS: Final = struct.Struct("=I")
"""A pmUnits word as its 4 native bytes (what ``pmUnits.from_buffer_copy`` takes)."""


def units_bytes(word: int) -> bytes:
    """The 4 native bytes of a pmUnits word, bit for bit (pad / extra bits included)."""
    return UNITS.pack(word & 0xFFFFFFFF)


_SPACE: Final = ("byte", "Kbyte", "Mbyte", "Gbyte", "Tbyte", "Pbyte", "Ebyte", "Zbyte", "Ybyte")
_TIME: Final = ("nanosec", "microsec", "millisec", "sec", "min", "hour")


def format_units(word: int, count_scale_named: bool = True) -> str:
    """A pmUnits word (the MMV metric ``dimension`` field) as ``pmUnitsStr(3)`` prints it,
    e.g. ``"byte / sec"``, ``"count x 10^6 / hour"``; ``""`` for no units.  A count scale
    without dimensions is ``"count x 10^6"`` as in PCP 7 (``count_scale_named``), ``"x
    10^6"`` as in PCP 6.  The low 8 bits (pad; PCP 7.2's extraUnit/extraScale) are
    ignored, as PCP 6 does.  The one rendering of units without libpcp."""
    dspace, dtime, dcount, sspace, stime, scount = units_fields(word)
    space = _SPACE[sspace] if sspace < len(_SPACE) else f"space-{sspace}"
    time_ = _TIME[stime] if stime < len(_TIME) else f"time-{stime}"
    count = {0: "count", 1: "count x 10"}.get(scount, f"count x 10^{scount}")
    dims = ((dspace, space), (dtime, time_), (dcount, count))

    def power(dim: int, name: str) -> str:
        return name if abs(dim) == 1 else f"{name}^{abs(dim)}"

    up = [power(d, n) for d, n in dims if d > 0]
    down = [power(d, n) for d, n in dims if d < 0]
    text = " ".join(up + (["/", *down] if down else []))
    if text:
        return text
    alone = {0: "", 1: "x 10"}.get(scount, f"x 10^{scount}")
    return f"count {alone}" if alone and count_scale_named else alone


UNITS_ELAPSED: Final = units_word(dim_time=1, scale_time=1)
"""ELAPSED metrics are served in microseconds (dimTime=1, scaleTime=PM_TIME_USEC)."""
