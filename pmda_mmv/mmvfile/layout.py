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

# section types (mmv_toc_type_t), numbered 1 to 6 in this order
TOC_INDOMS, TOC_INSTANCES, TOC_METRICS, TOC_VALUES, TOC_STRINGS, TOC_LABELS = range(1, 7)
TOC_NAMES: Final = dict(
    enumerate(("indoms", "instances", "metrics", "values", "strings", "labels"), start=1)
)
"""Section type -> its name as problems spell it."""

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
LABEL_KINDS: Final = dict(
    zip(
        (LABEL_INDOM, LABEL_CLUSTER, LABEL_ITEM, LABEL_INSTANCES),
        ("indom", "cluster", "item", "instances"),
        strict=True,
    )
)
"""Label flag -> the kind of label set it marks, as problems spell it."""
