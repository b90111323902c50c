"""On-disk layout of MMV (Memory Mapped Values) files, mmv(5), versions 1 to 3.

This module holds the layout only: struct formats, entry sizes and constants, named as in
mmv(5) and PCP's ``mmv_dev.h``/``mmv_stats.h``.  It has no PCP imports and reads nothing.

Layout (all offsets are absolute byte offsets from the start of the file; byte order and
alignment are the writer's native ones, every 8-byte field is 8-byte aligned)::

    header      40 bytes at 0       magic "MMV\\0", version, g1, g2, tocs, flags, process, cluster
    TOC         16 bytes x tocs     type, count, offset            (starts at 40)
    INDOMS      32 bytes each       serial, count, offset, shorthelp, longhelp
    INSTANCES   80 bytes (v1)       indom, pad, internal, external[64]
                24 bytes (v2, v3)   indom, pad, internal, external (string offset)
    METRICS    104 bytes (v1)       name[64], item, type, semantics, dimension, indom, pad,
                                    shorthelp, longhelp
                48 bytes (v2, v3)   name (string offset), item, type, semantics, dimension,
                                    indom, pad, shorthelp, longhelp
    VALUES      32 bytes each       value (pmAtomValue), extra, metric offset, instance offset
    STRINGS    256 bytes each       NUL-terminated text
    LABELS     256 bytes each       flags, identity, internal, payload[244] (JSON object)

Version only selects the metric and instance entry layouts; a LABELS section is honoured
in any version (the C reference does the same).  A string offset of 0 means "absent".
"""

from __future__ import annotations

import re
import struct
from typing import Final


class Record(struct.Struct):
    """One on-disk record: its ``struct`` format and size together with the byte offset of
    each named field inside it, computed once from the format (as CPython's ``zipfile``
    keeps ``structCentralDir``, ``sizeCentralDir`` and the ``_CD_*`` indices together).
    ``names`` lists the fields in format order; ``x`` padding has no name.  Offsets are
    read as ``RECORD.at["field"]``, or ``RECORD.offset(base, "field")`` for an entry at
    ``base``."""

    def __init__(self, format: str, names: tuple[str, ...]) -> None:
        super().__init__(format)
        at: dict[str, int] = {}
        prefix, fields = format[0], iter(names)
        for count, code in re.findall(r"(\d*)([a-zA-Z?])", format[1:]):
            if code != "x":
                at[next(fields)] = struct.calcsize(prefix)
            prefix += count + code
        if len(at) != len(names):
            raise ValueError(f"{format}: {len(names)} names for {len(at)} fields")
        self.names = names
        self.at: Final[dict[str, int]] = at

    def offset(self, base: int, name: str) -> int:
        """Absolute offset of field ``name`` of the entry at ``base``."""
        return base + self.at[name]


MAGIC: Final = b"MMV\0"
VERSIONS: Final = (1, 2, 3)

# -- header (mmv_disk_header_t) ------------------------------------------------------------
HEADER: Final = Record(
    "=4siQQiIii", ("magic", "version", "g1", "g2", "tocs", "flags", "process", "cluster")
)
"""magic, version, g1, g2, tocs, flags, process, cluster."""
HEADER_SIZE: Final = HEADER.size  # 40


def header_field(name: str) -> str:
    """``header.NAME at offset N``: a header field as problems name it (:class:`MmvError`
    of :mod:`pmda_mmv.mmvfile.errors` spells a field and its offset so)."""
    return f"header.{name} at offset {HEADER.at[name]}"


GENERATION: Final = struct.Struct("=QQ")
GENERATION_OFFSET: Final = HEADER.at["g1"]  # g1, then g2

FLAG_NOPREFIX: Final = 0x1
FLAG_PROCESS: Final = 0x2
FLAG_SENTINEL: Final = 0x4
FLAGS_KNOWN: Final = FLAG_NOPREFIX | FLAG_PROCESS | FLAG_SENTINEL

# -- TOC (mmv_disk_toc_t) ------------------------------------------------------------------
TOC: Final = Record("=IIQ", ("type", "count", "offset"))
"""type, count (int32 on disk, read unsigned as the reference does), offset."""
TOC_SIZE: Final = TOC.size  # 16

TOC_INDOMS: Final = 1
TOC_INSTANCES: Final = 2
TOC_METRICS: Final = 3
TOC_VALUES: Final = 4
TOC_STRINGS: Final = 5
TOC_LABELS: Final = 6
TOC_NAMES: Final = {
    TOC_INDOMS: "indoms",
    TOC_INSTANCES: "instances",
    TOC_METRICS: "metrics",
    TOC_VALUES: "values",
    TOC_STRINGS: "strings",
    TOC_LABELS: "labels",
}

# -- section entries -----------------------------------------------------------------------
INDOM: Final = Record("=IIQQQ", ("serial", "count", "offset", "shorthelp", "longhelp"))
"""serial, count, offset (first instance), shorthelp, longhelp."""

METRIC_FIELDS: Final = (
    "name",
    "item",
    "type",
    "semantics",
    "dimension",
    "indom",
    "shorthelp",
    "longhelp",
)

INSTANCE_V1: Final = Record("=Q4xi64s", ("indom", "internal", "external"))
"""indom (entry offset), internal, external (inline, 64 bytes)."""
INSTANCE_V2: Final = Record("=Q4xiQ", ("indom", "internal", "external"))
"""indom (entry offset), internal, external (string offset)."""

METRIC_V1: Final = Record("=64sIiIIi4xQQ", METRIC_FIELDS)
"""name (inline, 64 bytes), item, type, semantics, dimension, indom, shorthelp, longhelp."""
METRIC_V2: Final = Record("=QIiIIi4xQQ", METRIC_FIELDS)
"""name (string offset), item, type, semantics, dimension, indom, shorthelp, longhelp."""

VALUE: Final = Record("=8sqQQ", ("value", "extra", "metric", "instance"))
"""value (8 raw bytes of a pmAtomValue), extra, metric (entry offset), instance (entry offset)."""
VALUE_SIZE: Final = VALUE.size  # 32
VALUE_EXTRA: Final = struct.Struct("=q")
EXTRA_OFFSET: Final = VALUE.at["extra"]

STRING_SIZE: Final = 256  # MMV_STRINGMAX, including the terminating NUL
NAME_SIZE: Final = 64  # MMV_NAMEMAX, v1 inline names

LABEL: Final = Record("=IIi244s", ("flags", "identity", "internal", "payload"))
"""flags, identity, internal, payload (NUL-terminated JSON object, 244 bytes)."""
LABEL_PAYLOAD_SIZE: Final = 244  # MMV_LABELMAX

ENTRY_SIZE: Final = {
    (TOC_INDOMS, 1): INDOM.size,
    (TOC_INDOMS, 2): INDOM.size,
    (TOC_INSTANCES, 1): INSTANCE_V1.size,
    (TOC_INSTANCES, 2): INSTANCE_V2.size,
    (TOC_METRICS, 1): METRIC_V1.size,
    (TOC_METRICS, 2): METRIC_V2.size,
    (TOC_VALUES, 1): VALUE.size,
    (TOC_VALUES, 2): VALUE.size,
    (TOC_STRINGS, 1): STRING_SIZE,
    (TOC_STRINGS, 2): STRING_SIZE,
    (TOC_LABELS, 1): LABEL.size,
    (TOC_LABELS, 2): LABEL.size,
}
"""(section type, layout) -> entry size; layout is 1 for version 1 files, 2 otherwise."""


def entry_layout(version: int) -> int:
    """Entry layout of a file version: 1 for version 1, 2 for versions 2 and 3."""
    return 1 if version == 1 else 2


# -- metric types (mmv_metric_type_t) and their value formats -----------------------------
TYPE_NOSUPPORT: Final = -1
TYPE_I32: Final = 0
TYPE_U32: Final = 1
TYPE_I64: Final = 2
TYPE_U64: Final = 3
TYPE_FLOAT: Final = 4
TYPE_DOUBLE: Final = 5
TYPE_STRING: Final = 6
TYPE_ELAPSED: Final = 9
TYPE_NAMES: Final = {
    TYPE_NOSUPPORT: "nosupport",
    TYPE_I32: "32",
    TYPE_U32: "u32",
    TYPE_I64: "64",
    TYPE_U64: "u64",
    TYPE_FLOAT: "float",
    TYPE_DOUBLE: "double",
    TYPE_STRING: "string",
    TYPE_ELAPSED: "elapsed",
}

VALUE_FORMAT: Final = {
    TYPE_I32: struct.Struct("=i"),
    TYPE_U32: struct.Struct("=I"),
    TYPE_I64: struct.Struct("=q"),
    TYPE_U64: struct.Struct("=Q"),
    TYPE_FLOAT: struct.Struct("=f"),
    TYPE_DOUBLE: struct.Struct("=d"),
    TYPE_ELAPSED: struct.Struct("=q"),
}
"""Value struct per numeric type, read at the start of the value's 8-byte union."""
SENTINEL_BYTES: Final = b"\xff" * 8

# -- semantics (PM_SEM_*, 0 is served as counter) ------------------------------------------
SEM_UNSET: Final = 0
SEM_COUNTER: Final = 1
SEM_INSTANT: Final = 3
SEM_DISCRETE: Final = 4
SEMANTICS: Final = (SEM_UNSET, SEM_COUNTER, SEM_INSTANT, SEM_DISCRETE)
SEM_NAMES: Final = {SEM_COUNTER: "counter", SEM_INSTANT: "instant", SEM_DISCRETE: "discrete"}
"""Names of the semantics PCP serves (PM_SEM_*; unset is served as counter)."""

INDOM_NONE: Final = (0, 0xFFFFFFFF)
"""A metric's indom field holding either of these means singular (PM_INDOM_NULL)."""

# -- labels (PM_LABEL_*) -------------------------------------------------------------------
LABEL_INDOM: Final = 0x4
LABEL_CLUSTER: Final = 0x8
LABEL_ITEM: Final = 0x10
LABEL_INSTANCES: Final = 0x20
LABEL_OPTIONAL: Final = 0x80
LABEL_KINDS: Final = {
    LABEL_INDOM: "indom",
    LABEL_CLUSTER: "cluster",
    LABEL_ITEM: "item",
    LABEL_INSTANCES: "instances",
}

# -- limits of the C reference (mmv.c) -----------------------------------------------------
MAX_ITEM: Final = 1023  # 10-bit PMID item; also the count limit of a METRICS section
MAX_CLUSTER: Final = 4095  # 12-bit PMID cluster
MAX_SERIAL: Final = (1 << 22) - 1  # 22-bit pmInDom serial; also an INDOMS count limit
MAX_LABELS: Final = 255  # count limit of a LABELS section

# -- limits of ours (bounded work per file) ------------------------------------------------
MAX_TOCS: Final = 1024
"""TOC entries accepted in one file; libpcp_mmv writes at most 6, other writers as few.
More refuse the file (header.tocs), so no file makes its validation cost grow without end."""
MAX_ENTRIES: Final = {
    TOC_INDOMS: 10_000,
    TOC_INSTANCES: 50_000,
    TOC_METRICS: 4 * (MAX_ITEM + 1),
    TOC_VALUES: 1 << 20,
    TOC_LABELS: 16_384,
}
"""Entries of one kind accepted in one file, over all its sections (from the TOC counts,
before any section is read): past one, the file is refused, so that no single file costs
one request more than about a second to load and index, whatever it holds.  The values
limit also bounds the value slots (metrics x instances of their indoms).  Real writers
stay far below: libpcp_mmv's largest test files hold a few hundred instances; the
benchmarks' largest file holds 1,000,000 values over 10,000 instances."""
LOAD_COST: Final = {
    TOC_INDOMS: 10.0,
    TOC_INSTANCES: 5.0,
    TOC_METRICS: 100.0,
    TOC_VALUES: 0.6,
    TOC_LABELS: 22.0,
}
"""What one entry of each kind costs a load at worst, in microseconds of the agent's work
(parse, catalogue and python3-pcp's tables), measured on the reference machine (2 cores,
docs/bounded.md): a metric over an indom of its own (its PCP indom and descriptor), an
instance served, a value entry out of instance order (one at a time; in order they cost a
third of it), an instance label.  Strings cost nothing here: they are read when used."""
MAX_LOAD_COST: Final = 1_000_000
"""Most a file's entries may cost to load, by :data:`LOAD_COST` (about a second at worst
on the reference machine, half of it for files written in instance order): each entry kind
at its own limit fits (1M values over 1,024 instances: 0.71M; 20 metrics x 50,000
instances: 0.85M), a file at every limit at once (1.7M) does not, and is refused from its
TOC counts before any section is read, so that no single load stalls a request for long."""
MAX_PROBLEMS: Final = 32
"""Problems recorded (and logged) per file load: the first ones, then one summary line
with the count of the others."""

# -- limits of libpcp (labels.c: a label set it accepts) -----------------------------------
PM_MAXLABELS: Final = 255  # pmapi.h; libpcp refuses a set of this many labels or more

# -- pmUnits word (native bitfields; little-endian bit positions) -------------------------


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

# -- generation numbers --------------------------------------------------------------------

TIME_SINCE: Final = 946684800  # 2000-01-01: no MMV file was written before
TIME_AHEAD: Final = 86400  # clocks may disagree by this much


def generation_time(g1: int, now: float) -> float | None:
    """When a file was created, read from its generation number, or None when the number
    is not a time.  Writers disagree on the encoding, so it is decided by plausibility (a
    time since 2000, at most a day after ``now``): libpcp_mmv (C, python3-pcp, Perl) writes
    ``(tv_sec << 32) | tv_usec`` (microseconds below 10**6), Speed, Parfait and Hornet plain
    Unix seconds; anything else (a counter) is no time.  The two readings cannot both be
    plausible: the first is above 4 * 10**18."""
    seconds, usec = g1 >> 32, g1 & 0xFFFFFFFF
    if TIME_SINCE <= seconds <= now + TIME_AHEAD and usec < 1_000_000:
        return seconds + usec / 1e6
    if TIME_SINCE <= g1 <= now + TIME_AHEAD:
        return float(g1)
    return None
