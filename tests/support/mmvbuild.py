"""Test-only MMV byte builder and real-writer helpers.

:class:`MmvBuilder` writes version 1, 2 and 3 files byte by byte from a description
(indoms with instances, metrics, values, labels, extra strings), using only the structs of
:mod:`pmda_mmv.mmvfile.layout`.  Every on-disk field can be overridden (``raw`` on each entry,
``header``/``toc`` on the builder, :meth:`Image.patch` afterwards) so that malformed files
can be made.  :meth:`Image.at` gives the absolute byte offset of any entry or field, derived
from the struct formats, so tests can assert the offsets the reader reports.

Layout written (the order libpcp_mmv uses unless ``order`` says otherwise): header, TOC,
indoms, instances, metrics, values, strings, labels.  METRICS and VALUES always get a TOC
entry; the other sections only when they have entries.

The real-writer helpers write files with python3-pcp's ``pcp.mmv`` (:func:`write_pcp_mmv`)
and with libpcp_mmv's registry API (:func:`write_capi`, :mod:`tests.support.writers.libpcp_mmv`), in
this process, and return what they wrote so tests can compare the reader against the
writer's input.
"""

from __future__ import annotations

import os
import re
import struct
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pmda_mmv.mmvfile import layout, pmunits

Raw = dict[str, Any]

METRIC_FIELDS = ("name", "item", "type", "semantics", "dimension", "indom", "shorthelp", "longhelp")

# Field names of the layout.py structs, in struct order ('x' padding has no name).
FIELDS: dict[struct.Struct, tuple[str, ...]] = {
    layout.HEADER: ("magic", "version", "g1", "g2", "tocs", "flags", "process", "cluster"),
    layout.TOC: ("type", "count", "offset"),
    layout.INDOM: ("serial", "count", "offset", "shorthelp", "longhelp"),
    layout.INSTANCE_V1: ("indom", "internal", "external"),
    layout.INSTANCE_V2: ("indom", "internal", "external"),
    layout.METRIC_V1: METRIC_FIELDS,
    layout.METRIC_V2: METRIC_FIELDS,
    layout.VALUE: ("value", "extra", "metric", "instance"),
    layout.LABEL: ("flags", "identity", "internal", "payload"),
}


def field_offsets(st: struct.Struct) -> dict[str, int]:
    """Offset of each named field inside an entry, computed from the struct format."""
    offsets: dict[str, int] = {}
    names = iter(FIELDS[st])
    prefix = st.format[0]
    for count, code in re.findall(r"(\d*)([a-zA-Z?])", st.format[1:]):
        if code != "x":
            offsets[next(names)] = struct.calcsize(prefix)
        prefix += count + code
    return offsets


def entry_struct(section: str, version: int) -> struct.Struct:
    """The layout.py struct of one entry of ``section`` in a file of ``version``."""
    v1 = layout.entry_layout(version) == 1
    return {
        "header": layout.HEADER,
        "toc": layout.TOC,
        "indoms": layout.INDOM,
        "instances": layout.INSTANCE_V1 if v1 else layout.INSTANCE_V2,
        "metrics": layout.METRIC_V1 if v1 else layout.METRIC_V2,
        "values": layout.VALUE,
        "labels": layout.LABEL,
    }[section]


def cbytes(text: str | bytes, size: int) -> bytes:
    """``text`` as a NUL-padded ``size``-byte field; longer text is cut (no NUL left)."""
    raw = text.encode("utf-8") if isinstance(text, str) else text
    return raw[:size].ljust(size, b"\0")


# -- description ----------------------------------------------------------------------------


@dataclass
class Instance:
    internal: int
    external: str | bytes
    raw: Raw = field(default_factory=dict)


@dataclass
class Indom:
    serial: int
    instances: list[Instance] = field(default_factory=list)
    shorthelp: str | bytes | None = None
    longhelp: str | bytes | None = None
    raw: Raw = field(default_factory=dict)


@dataclass
class Metric:
    name: str | bytes
    item: int
    type: int = layout.TYPE_U32
    semantics: int = layout.SEM_INSTANT
    dimension: int = 0
    indom: int | None = None  # serial; None = singular (written as 0xFFFFFFFF)
    shorthelp: str | bytes | None = None
    longhelp: str | bytes | None = None
    raw: Raw = field(default_factory=dict)


@dataclass
class Value:
    metric: str | bytes  # name of a described metric
    instance: int | None = None  # internal id of one of its indom's instances
    value: Any = 0  # int / float / str per the metric's type
    extra: int = 0  # ELAPSED start (negative while running); strings get their offset
    raw: Raw = field(default_factory=dict)


@dataclass
class Label:
    flags: int
    identity: int
    payload: str | bytes
    internal: int = -1
    raw: Raw = field(default_factory=dict)


DEFAULT_ORDER = (
    layout.TOC_INDOMS,
    layout.TOC_INSTANCES,
    layout.TOC_METRICS,
    layout.TOC_VALUES,
    layout.TOC_STRINGS,
    layout.TOC_LABELS,
)
SECTION = {
    layout.TOC_INDOMS: "indoms",
    layout.TOC_INSTANCES: "instances",
    layout.TOC_METRICS: "metrics",
    layout.TOC_VALUES: "values",
    layout.TOC_STRINGS: "strings",
    layout.TOC_LABELS: "labels",
}


@dataclass
class MmvBuilder:
    """A description of one MMV file; :meth:`build` lays it out and packs it.

    ``header`` overrides header fields by name; ``toc`` overrides TOC entry fields by TOC
    index; ``extra_toc`` appends raw (type, count, offset) TOC entries; ``order`` is the
    section order; ``strings`` are extra string entries; ``tail`` bytes are appended."""

    version: int = 1
    flags: int = 0
    cluster: int = 1
    generation: int = 0x5F5E1000000001
    process: int = 0
    indoms: list[Indom] = field(default_factory=list)
    metrics: list[Metric] = field(default_factory=list)
    values: list[Value] = field(default_factory=list)
    labels: list[Label] = field(default_factory=list)
    strings: list[str | bytes] = field(default_factory=list)
    header: Raw = field(default_factory=dict)
    toc: dict[int, Raw] = field(default_factory=dict)
    extra_toc: list[tuple[int, int, int]] = field(default_factory=list)
    order: Sequence[int] = DEFAULT_ORDER
    tail: bytes = b""

    def build(self) -> Image:
        return _Layout(self).pack()

    def write(self, path: str | Path) -> Image:
        image = self.build()
        image.write(path)
        return image


@dataclass
class Image:
    """Packed bytes of a built file plus where everything went.

    ``entries[section]`` lists absolute entry offsets ("toc", "indoms", "instances" in
    indom order, "metrics", "values", "strings", "labels"); ``toc_index[type]`` the TOC
    index of each section; ``string_at`` the offset of each string entry by its text."""

    data: bytearray
    version: int
    entries: dict[str, list[int]]
    toc_index: dict[int, int]
    string_at: dict[bytes, int]

    def at(self, section: str, index: int = 0, name: str | None = None) -> int:
        """Absolute offset of entry ``index`` of ``section`` (or of its field ``name``)."""
        base = 0 if section == "header" else self.entries[section][index]
        if name is None:
            return base
        return base + field_offsets(entry_struct(section, self.version))[name]

    def toc_at(self, toc_type: int, name: str | None = None) -> int:
        """Offset of the TOC entry for section ``toc_type`` (or of its field ``name``)."""
        return self.at("toc", self.toc_index[toc_type], name)

    def get(self, section: str, index: int, name: str) -> Any:
        st = entry_struct(section, self.version)
        return st.unpack_from(self.data, self.at(section, index))[FIELDS[st].index(name)]

    def patch(self, section: str, index: int, name: str, value: Any) -> Image:
        """Overwrite one field of one entry in place (packed with its layout.py struct)."""
        st = entry_struct(section, self.version)
        at = self.at(section, index)
        fields = list(st.unpack_from(self.data, at))
        fields[FIELDS[st].index(name)] = value
        st.pack_into(self.data, at, *fields)
        return self

    def write(self, path: str | Path) -> Path:
        Path(path).write_bytes(bytes(self.data))
        return Path(path)


class _Layout:
    """Two passes: count entries and strings, place sections, then pack every entry."""

    def __init__(self, b: MmvBuilder) -> None:
        self.b = b
        self.v1 = layout.entry_layout(b.version) == 1
        self.pool: list[bytes] = []
        self.string_index: dict[tuple[int, str], int] = {}  # (id of entry, field) -> pool index
        self.collect_strings()
        self.insts = [(d, i) for d in b.indoms for i in d.instances]
        counts = {
            layout.TOC_INDOMS: len(b.indoms),
            layout.TOC_INSTANCES: len(self.insts),
            layout.TOC_METRICS: len(b.metrics),
            layout.TOC_VALUES: len(b.values),
            layout.TOC_STRINGS: len(self.pool),
            layout.TOC_LABELS: len(b.labels),
        }
        always = (layout.TOC_METRICS, layout.TOC_VALUES)
        self.present = [t for t in b.order if counts[t] or t in always]
        self.counts = counts
        self.place()

    # -- pass 1

    def add_string(self, key: tuple[int, str], text: str | bytes | None) -> None:
        if text is not None:
            self.string_index[key] = len(self.pool)
            self.pool.append(cbytes(text, layout.STRING_SIZE))

    def collect_strings(self) -> None:
        b = self.b
        for d in b.indoms:
            for inst in d.instances:
                if not self.v1:
                    self.add_string((id(inst), "external"), inst.external)
        for m in b.metrics:
            if not self.v1:
                self.add_string((id(m), "name"), m.name)
        for val in b.values:
            if self.metric(val.metric).type == layout.TYPE_STRING:
                self.add_string((id(val), "value"), str(val.value))
        for m in b.metrics:
            self.add_string((id(m), "shorthelp"), m.shorthelp)
            self.add_string((id(m), "longhelp"), m.longhelp)
        for d in b.indoms:
            self.add_string((id(d), "shorthelp"), d.shorthelp)
            self.add_string((id(d), "longhelp"), d.longhelp)
        for k, text in enumerate(b.strings):
            self.add_string((k, "extra"), text)

    def place(self) -> None:
        ntoc = len(self.present) + len(self.b.extra_toc)
        pos = layout.HEADER_SIZE + ntoc * layout.TOC_SIZE
        self.entries: dict[str, list[int]] = {
            "toc": [layout.HEADER_SIZE + k * layout.TOC_SIZE for k in range(ntoc)]
        }
        self.section_at: dict[int, int] = {}
        for t in self.present:
            size = layout.ENTRY_SIZE[(t, layout.entry_layout(self.b.version))]
            self.section_at[t] = pos
            self.entries[SECTION[t]] = [pos + k * size for k in range(self.counts[t])]
            pos += self.counts[t] * size
        for t in DEFAULT_ORDER:
            self.entries.setdefault(SECTION[t], [])
        self.size = pos

    # -- lookups

    def metric(self, name: str | bytes) -> Metric:
        for m in self.b.metrics:
            if m.name == name:
                return m
        raise KeyError(name)

    def string_offset(self, key: tuple[int, str]) -> int:
        k = self.string_index.get(key)
        return 0 if k is None else self.entries["strings"][k]

    def instance_offset(self, serial: int | None, internal: int | None) -> int:
        for k, (d, inst) in enumerate(self.insts):
            if d.serial == serial and inst.internal == internal:
                return self.entries["instances"][k]
        return 0

    # -- pass 2

    def pack(self) -> Image:
        b = self.b
        data = bytearray(self.size)
        head = dict(
            magic=layout.MAGIC,
            version=b.version,
            g1=b.generation,
            g2=b.generation,
            tocs=len(self.entries["toc"]),
            flags=b.flags,
            process=b.process,
            cluster=b.cluster,
        )
        _pack(layout.HEADER, data, 0, head, b.header)
        tocs = [(t, self.counts[t], self.section_at[t]) for t in self.present] + b.extra_toc
        for k, (t, count, offset) in enumerate(tocs):
            toc = dict(type=t, count=count, offset=offset)
            _pack(layout.TOC, data, self.entries["toc"][k], toc, b.toc.get(k, {}))
        self.pack_indoms(data)
        self.pack_metrics(data)
        self.pack_values(data)
        for k, text in enumerate(self.pool):
            data[self.entries["strings"][k] : self.entries["strings"][k] + len(text)] = text
        for k, lab in enumerate(b.labels):
            payload = cbytes(lab.payload, layout.LABEL_PAYLOAD_SIZE)
            entry = dict(
                flags=lab.flags, identity=lab.identity, internal=lab.internal, payload=payload
            )
            _pack(layout.LABEL, data, self.entries["labels"][k], entry, lab.raw)
        strings = {
            bytes(t).split(b"\0")[0]: self.entries["strings"][k] for k, t in enumerate(self.pool)
        }
        toc_index = {t: k for k, t in enumerate(self.present)}
        return Image(data + b.tail, b.version, self.entries, toc_index, strings)

    def pack_indoms(self, data: bytearray) -> None:
        ist = entry_struct("instances", self.b.version)
        k = 0
        for n, d in enumerate(self.b.indoms):
            at = self.entries["indoms"][n]
            first = self.entries["instances"][k] if d.instances else 0
            entry = dict(
                serial=d.serial,
                count=len(d.instances),
                offset=first,
                shorthelp=self.string_offset((id(d), "shorthelp")),
                longhelp=self.string_offset((id(d), "longhelp")),
            )
            _pack(layout.INDOM, data, at, entry, d.raw)
            for inst in d.instances:
                ext = (
                    cbytes(inst.external, layout.NAME_SIZE)
                    if self.v1
                    else self.string_offset((id(inst), "external"))
                )
                entry = dict(indom=at, internal=inst.internal, external=ext)
                _pack(ist, data, self.entries["instances"][k], entry, inst.raw)
                k += 1

    def pack_metrics(self, data: bytearray) -> None:
        mst = entry_struct("metrics", self.b.version)
        for n, m in enumerate(self.b.metrics):
            name = (
                cbytes(m.name, layout.NAME_SIZE) if self.v1 else self.string_offset((id(m), "name"))
            )
            entry = dict(
                name=name,
                item=m.item,
                type=m.type,
                semantics=m.semantics,
                dimension=m.dimension,
                indom=-1 if m.indom is None else m.indom,
                shorthelp=self.string_offset((id(m), "shorthelp")),
                longhelp=self.string_offset((id(m), "longhelp")),
            )
            _pack(mst, data, self.entries["metrics"][n], entry, m.raw)

    def pack_values(self, data: bytearray) -> None:
        index = {id(m): n for n, m in enumerate(self.b.metrics)}
        for n, val in enumerate(self.b.values):
            m = self.metric(val.metric)
            extra = val.extra
            if m.type == layout.TYPE_STRING:
                extra = self.string_offset((id(val), "value"))
            entry = dict(
                value=encode_value(m.type, val.value),
                extra=extra,
                metric=self.entries["metrics"][index[id(m)]],
                instance=self.instance_offset(m.indom, val.instance) if m.indom is not None else 0,
            )
            _pack(layout.VALUE, data, self.entries["values"][n], entry, val.raw)


def encode_value(mtype: int, value: Any) -> bytes:
    """The 8-byte pmAtomValue of ``value`` for an MMV type (zeros for STRING/NOSUPPORT)."""
    if isinstance(value, bytes):
        return value.ljust(8, b"\0")
    if mtype in layout.VALUE_FORMAT:
        return layout.VALUE_FORMAT[mtype].pack(value).ljust(8, b"\0")
    return bytes(8)


def _pack(st: struct.Struct, data: bytearray, at: int, fields: Raw, raw: Raw) -> None:
    unknown = set(raw) - set(FIELDS[st])
    if unknown:
        raise KeyError(f"no such field(s) {sorted(unknown)} in {FIELDS[st]}")
    merged = {**fields, **raw}
    st.pack_into(data, at, *(merged[n] for n in FIELDS[st]))


# -- ready-made descriptions ----------------------------------------------------------------

TYPE_SAMPLES: dict[int, Any] = {
    layout.TYPE_I32: -42,
    layout.TYPE_U32: 4000000000,
    layout.TYPE_I64: -(1 << 40),
    layout.TYPE_U64: (1 << 63) + 5,
    layout.TYPE_FLOAT: 1.5,
    layout.TYPE_DOUBLE: 2.25,
    layout.TYPE_STRING: "text",
    layout.TYPE_ELAPSED: 1500000,
}
INSTANCES = ((0, "zero"), (1, "one"), (7, "seven"))


def sample(version: int = 1, labels: bool | None = None) -> MmvBuilder:
    """A valid file: indom 3 of three instances, one singular and one per-instance metric
    of every value type (items 1..16, names ``s.<type>`` and ``m.<type>``), help texts, a
    value for every (metric, instance), and (version 3, or ``labels``) one label of each
    kind."""
    b = MmvBuilder(version=version, cluster=12)
    b.indoms.append(Indom(3, [Instance(i, n) for i, n in INSTANCES], "indom short", "indom\nlong"))
    item = 1
    for mtype, value in TYPE_SAMPLES.items():
        tname = layout.TYPE_NAMES[mtype]
        for multi in (False, True):
            name = f"{'m' if multi else 's'}.t{tname}"
            b.metrics.append(
                Metric(
                    name,
                    item,
                    mtype,
                    layout.SEM_INSTANT,
                    pmunits.units_word(dim_count=1),
                    3 if multi else None,
                    f"{name} short",
                    f"{name} long",
                )
            )
            item += 1
            targets: Sequence[int | None] = [i for i, _ in INSTANCES] if multi else [None]
            b.values += [Value(name, i, value) for i in targets]
    if labels or (labels is None and version == 3):
        b.labels += [
            Label(layout.LABEL_CLUSTER, 12, '{"app":"sample"}'),
            Label(layout.LABEL_INDOM, 3, '{"dom":1}'),
            Label(layout.LABEL_ITEM | layout.LABEL_OPTIONAL, 1, '{"item":true}'),
            Label(layout.LABEL_INSTANCES, 3, '{"inst":"seven"}', internal=7),
        ]
    return b


def single(cluster: int = 1, value: int = 1, name: str = "v", **header: Any) -> MmvBuilder:
    """A file with one singular U32 metric ``name`` (item 1) holding ``value``; ``header``
    sets other :class:`MmvBuilder` fields (``flags``, ``process``, ``version`` ...)."""
    b = MmvBuilder(cluster=cluster, **header)
    b.metrics.append(Metric(name, 1))
    b.values.append(Value(name, None, value))
    return b


def publish(path: Path, file: MmvBuilder | Image | bytes) -> None:
    """Publish ``file`` at ``path`` as libpcp_mmv does: written under a hidden name, mode
    0644, then renamed over ``path`` (a new inode under the name)."""
    tmp = path.with_name(f".{path.name}.tmp")
    if isinstance(file, bytes):
        tmp.write_bytes(file)
    else:
        file.write(tmp)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def dead_pid() -> int:
    """The pid of a process that has exited and been reaped (for PROCESS-flag files)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


# -- real writers ---------------------------------------------------------------------------

COUNT = pmunits.units_word(dim_count=1)
MSEC = pmunits.units_word(dim_time=1, scale_time=2)


@dataclass
class Written:
    """What a real writer was asked to write, for comparison with what the reader sees.

    ``metrics``: name -> (item, type, semantics, dimension, indom serial or None,
    shorthelp, longhelp); ``instances``: serial -> [(internal, external)]; ``values``:
    (name, external or None) -> value; ``labels``: (flags, identity, internal, payload)."""

    path: Path
    cluster: int
    flags: int
    metrics: dict[str, tuple[Any, ...]]
    instances: dict[int, list[tuple[int, str]]]
    values: dict[tuple[str, str | None], Any]
    labels: list[tuple[int, int, int, str]] = field(default_factory=list)
    handle: Any = None  # keeps the writer's mapping (and its library objects) alive


def write_pcp_mmv(path: Path, cluster: int = 42, flags: int = 0) -> Written:
    """Write ``path`` with python3-pcp's ``pcp.mmv`` (MMV v1 through mmv_stats_init).

    6.0.3's ``mmv_metric``/``mmv_indom`` never set semantics and dimension and copy the
    one-line help into the long help (python-pmda-api.md P15): both are set here after
    construction.  ``handle`` is the live MemoryMappedValues, for updates in place."""
    from pcp import mmv, pmapi

    spec = {
        "py.counter": (1, layout.TYPE_U64, layout.SEM_COUNTER, COUNT, None, "a counter", "counts"),
        "py.gauge": (2, layout.TYPE_I32, layout.SEM_INSTANT, 0, 5, "per colour", "one per colour"),
        "py.name": (3, layout.TYPE_STRING, layout.SEM_DISCRETE, 0, None, "a name", "the name"),
        "py.timer": (4, layout.TYPE_ELAPSED, layout.SEM_COUNTER, MSEC, 5, None, None),
        "py.ratio": (5, layout.TYPE_DOUBLE, layout.SEM_INSTANT, 0, None, "a ratio", None),
    }
    insts = [(0, "red"), (1, "green"), (2, "blue")]
    writer = mmv.MemoryMappedValues(str(path), flags=flags, cluster=cluster)
    indom = mmv.mmv_indom(serial=5, shorttext="colours", helptext="ignored in 6.0.3")
    indom.helptext = b"the colours"
    indom.set_instances([mmv.mmv_instance(i, n) for i, n in insts])
    metrics = []
    for name, (item, mtype, sem, dim, serial, short, long_) in spec.items():
        m = mmv.mmv_metric(name, item, mtype, sem, pmapi.pmUnits(), serial or 0xFFFFFFFF)
        m.semantics, m.shorttext = sem, short and short.encode()
        m.helptext = long_ and long_.encode()
        m.dimension = pmapi.pmUnits.from_buffer_copy(struct.pack("=I", dim))
        metrics.append(m)
    writer.add_indoms([indom])
    writer.add_metrics(metrics)
    writer.start()
    if not writer.started():
        raise RuntimeError("pcp.mmv start failed")
    values: dict[tuple[str, str | None], Any] = {
        ("py.counter", None): 41,
        ("py.name", None): "from pcp.mmv",
        ("py.ratio", None): 0.75,
    }
    writer.lookup_set("py.counter", "", 41)
    writer.lookup_set_string("py.name", "", "from pcp.mmv")
    writer.lookup_set("py.ratio", "", 0.75)
    for k, (_, n) in enumerate(insts):
        writer.lookup_set("py.gauge", n, -k)
        values[("py.gauge", n)] = -k
        values[("py.timer", n)] = 0
    return Written(path, cluster, flags, spec, {5: insts}, values, handle=writer)


def write_capi(path: Path, cluster: int = 77, flags: int = 0, long_names: bool = False) -> Written:
    """Write ``path`` with libpcp_mmv's registry API (:mod:`tests.support.writers.libpcp_mmv`), with
    labels of every kind (so the library writes MMV v3).  ``long_names`` adds 64+ byte
    metric and instance names.  ``handle`` is the
    :class:`~tests.support.writers.libpcp_mmv.Registry` (its mapping stays open)."""
    from tests.support.writers.libpcp_mmv import LABEL_NUMBER, LABEL_STRING, Registry

    r = Registry(path, cluster, flags)
    long_inst = "i" * 70 if long_names else "third"
    insts = [(1, "first"), (2, "second"), (3, long_inst)]
    r.indom(9, insts, "nine", "indom nine")
    wide = "c.wide." + "w" * 70 if long_names else "c.wide"
    spec = {
        "c.count": (1, layout.TYPE_U64, layout.SEM_COUNTER, COUNT, 9, "per instance", "long text"),
        wide: (2, layout.TYPE_DOUBLE, layout.SEM_INSTANT, MSEC, None, None, None),
        "c.text": (3, layout.TYPE_STRING, layout.SEM_DISCRETE, 0, None, "text", None),
    }
    for name, (item, mtype, sem, dim, serial, short, long_) in spec.items():
        r.metric(name, item, mtype, sem, dim, serial, short, long_)
    labels = [
        (layout.LABEL_CLUSTER, cluster, -1, '{"app":"capi"}'),
        (layout.LABEL_INDOM, 9, -1, '{"dom":9}'),
        (layout.LABEL_ITEM, 1, -1, '{"met":1}'),
        (layout.LABEL_INSTANCES | layout.LABEL_OPTIONAL, 9, 2, '{"which":"second"}'),
    ]
    r.registry_label("app", '"capi"', LABEL_STRING)
    r.indom_label(9, "dom", "9", LABEL_NUMBER)
    r.metric_label(1, "met", "1", LABEL_NUMBER)
    r.instance_label(9, 2, "which", '"second"', LABEL_STRING, optional=True)
    r.start().set(wide, None, 2.5).set("c.text", None, "hello")
    values: dict[tuple[str, str | None], Any] = {(wide, None): 2.5, ("c.text", None): "hello"}
    for iid, name in insts:
        r.set("c.count", name, iid * 10)
        values[("c.count", name)] = iid * 10
    return Written(path, cluster, flags, spec, {9: insts}, values, labels, handle=r)


def new_generation(path: Path, generation: int) -> None:
    """Give ``path`` a new generation pair in place (same inode and size): its next
    snapshot raises Changed."""
    with open(path, "r+b") as f:
        f.seek(layout.GENERATION_OFFSET)
        f.write(struct.pack("=QQ", generation, generation))
