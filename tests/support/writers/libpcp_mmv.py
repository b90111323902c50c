"""A typed ctypes binding of libpcp_mmv, PCP's MMV writer library (``mmv_stats.h``).

The one binding in the tree; every test, benchmark and corpus writer that writes a file with
libpcp_mmv goes through it.

* :class:`Registry`: the registry API (``mmv_stats_registry``, ``mmv_stats_add_indom``,
  ``_add_instance``, ``_add_metric``, the four ``_add_*_label`` calls, ``mmv_stats_start``,
  ``mmv_stats_free``).  The library picks the file version itself: 1, 2 when a name or
  instance name has 64 bytes or more, 3 when there is any label.
* :func:`legacy_init`: the legacy ``mmv_stats_init`` (fixed 64-byte names, always version
  1) and ``mmv_stats2_init`` (name pointers, version 1 or 2).
* :class:`Mapping`: a started file, the writer's view of it: ``mmv_lookup_value_desc`` and
  the value calls (``mmv_set_atomvalue``, ``mmv_set_value``, ``mmv_inc_value``,
  ``mmv_set_string``, ``mmv_stats_inc/add/set/set_string``, ``mmv_stats_interval_start/end``,
  ``mmv_stats_stop``), and :meth:`Mapping.values`, the VALUES section in file order.

What differs between libpcp_mmv versions is decided by probing the loaded library, never by
its version number (:attr:`Library.add_instance_reports_success`).  The library keeps the
pointers it is given until the registry is freed, so every string passed in is kept alive by
the object that passed it.  Nothing here imports python3-pcp; pmUnits travel as their 32-bit
word (:func:`pmda_mmv.mmvfile.pmunits.units_word`).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pmda_mmv.mmvfile import layout

INDOM_NULL = -1
"""The registry API's "no indom" serial (``PM_INDOM_NULL`` as the ``int`` it takes)."""
INDOM_NULL_U32 = 0xFFFFFFFF
"""``PM_INDOM_NULL`` in the legacy structures' unsigned ``indom`` field."""

# mmv_value_type_t: the value type of a label (its JSON value)
LABEL_STRING, LABEL_NUMBER, LABEL_BOOLEAN, LABEL_NULL, LABEL_ARRAY, LABEL_MAP = range(1, 7)

_vp, _cp, _int, _double = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_double


class MmvError(RuntimeError):
    """A libpcp_mmv call failed (with the errno it left, when it set one)."""


class Units(ctypes.Structure):
    """``pmUnits``, passed by value: one 32-bit word of bitfields."""

    _fields_ = [("word", ctypes.c_uint32)]


class Atom(ctypes.Union):
    """``pmAtomValue``."""

    _fields_ = [
        ("l", ctypes.c_int32),
        ("ul", ctypes.c_uint32),
        ("ll", ctypes.c_int64),
        ("ull", ctypes.c_uint64),
        ("f", ctypes.c_float),
        ("d", ctypes.c_double),
        ("cp", ctypes.c_char_p),
    ]


ATOM_FIELD = {
    layout.TYPE_I32: "l",
    layout.TYPE_U32: "ul",
    layout.TYPE_I64: "ll",
    layout.TYPE_U64: "ull",
    layout.TYPE_FLOAT: "f",
    layout.TYPE_DOUBLE: "d",
    layout.TYPE_ELAPSED: "ll",
}
"""The pmAtomValue member each numeric MMV type is stored in."""


# -- the legacy init structures (mmv_stats_init, mmv_stats2_init) -----------------------------


class _Instance(ctypes.Structure):  # mmv_instances_t
    _fields_ = [("internal", ctypes.c_int32), ("external", ctypes.c_char * layout.NAME_SIZE)]


class _Instance2(ctypes.Structure):  # mmv_instances2_t
    _fields_ = [("internal", ctypes.c_int32), ("external", _cp)]


def _indom_fields(instance_t: Any) -> list[tuple[str, Any]]:
    return [
        ("serial", ctypes.c_uint32),
        ("count", ctypes.c_uint32),
        ("instances", ctypes.POINTER(instance_t)),
        ("shorttext", _cp),
        ("helptext", _cp),
    ]


class _Indom(ctypes.Structure):  # mmv_indom_t
    _fields_ = _indom_fields(_Instance)


class _Indom2(ctypes.Structure):  # mmv_indom2_t
    _fields_ = _indom_fields(_Instance2)


_METRIC_TAIL = [
    ("item", ctypes.c_uint32),
    ("type", ctypes.c_int),
    ("semantics", ctypes.c_int),
    ("dimension", Units),
    ("indom", ctypes.c_uint32),
    ("shorttext", _cp),
    ("helptext", _cp),
]


class _Metric(ctypes.Structure):  # mmv_metric_t
    _fields_ = [("name", ctypes.c_char * layout.NAME_SIZE), *_METRIC_TAIL]


class _Metric2(ctypes.Structure):  # mmv_metric2_t
    _fields_ = [("name", _cp), *_METRIC_TAIL]


@dataclass(frozen=True)
class LegacyIndom:
    """One ``mmv_indom_t``/``mmv_indom2_t``: serial, [(internal, external)], help texts."""

    serial: int
    instances: Sequence[tuple[int, str]]
    short: str | None = None
    long: str | None = None


@dataclass(frozen=True)
class LegacyMetric:
    """One ``mmv_metric_t``/``mmv_metric2_t``; ``indom`` None is ``MMV_INDOM_NULL``."""

    name: str
    item: int
    type: int
    semantics: int = layout.SEM_INSTANT
    units: int = 0
    indom: int | None = None
    short: str | None = None
    long: str | None = None


# -- the library ------------------------------------------------------------------------------

_PROTOTYPES: dict[str, tuple[Any, list[Any]]] = {
    "mmv_stats_registry": (_vp, [_cp, _int, _int]),
    "mmv_stats_add_indom": (_int, [_vp, _int, _cp, _cp]),
    "mmv_stats_add_instance": (_int, [_vp, _int, _int, _cp]),
    "mmv_stats_add_metric": (_int, [_vp, _cp, _int, _int, _int, Units, _int, _cp, _cp]),
    "mmv_stats_add_registry_label": (_int, [_vp, _cp, _cp, _int, _int]),
    "mmv_stats_add_indom_label": (_int, [_vp, _int, _cp, _cp, _int, _int]),
    "mmv_stats_add_metric_label": (_int, [_vp, _int, _cp, _cp, _int, _int]),
    "mmv_stats_add_instance_label": (_int, [_vp, _int, _int, _cp, _cp, _int, _int]),
    "mmv_stats_start": (_vp, [_vp]),
    "mmv_stats_free": (None, [_vp]),
    "mmv_stats_stop": (None, [_cp, _vp]),
    "mmv_stats_init": (_vp, [_cp, _int, _int, _vp, _int, _vp, _int]),
    "mmv_stats2_init": (_vp, [_cp, _int, _int, _vp, _int, _vp, _int]),
    "mmv_lookup_value_desc": (_vp, [_vp, _cp, _cp]),
    "mmv_set_atomvalue": (None, [_vp, _vp, ctypes.POINTER(Atom)]),
    "mmv_inc_atomvalue": (None, [_vp, _vp, ctypes.POINTER(Atom)]),
    "mmv_set_value": (None, [_vp, _vp, _double]),
    "mmv_inc_value": (None, [_vp, _vp, _double]),
    "mmv_set_string": (None, [_vp, _vp, _cp, _int]),
    "mmv_stats_inc": (None, [_vp, _cp, _cp]),
    "mmv_stats_add": (None, [_vp, _cp, _cp, _double]),
    "mmv_stats_set": (None, [_vp, _cp, _cp, _double]),
    "mmv_stats_set_string": (None, [_vp, _cp, _cp, _cp]),
    "mmv_stats_interval_start": (_vp, [_vp, _vp, _cp, _cp]),
    "mmv_stats_interval_end": (None, [_vp, _vp]),
}


class Library:
    """libpcp_mmv loaded with the prototypes of ``mmv_stats.h``; ``fn(name)`` is a call."""

    def __init__(self, path: str | None = None) -> None:
        name = path or ctypes.util.find_library("pcp_mmv") or "libpcp_mmv.so.1"
        self.cdll = ctypes.CDLL(name, use_errno=True)
        for symbol, (restype, argtypes) in _PROTOTYPES.items():
            call = getattr(self.cdll, symbol)
            call.restype, call.argtypes = restype, argtypes

    def fn(self, symbol: str) -> Any:
        return getattr(self.cdll, symbol)

    @functools.cached_property
    def add_instance_reports_success(self) -> bool:
        """Whether ``mmv_stats_add_instance`` returns 0 when it has added the instance.  Up
        to PCP 6.x its indom search loop has no ``break``, so it adds the instance and then
        returns -1 (EINVAL) all the same; PCP 7.0 returns 0.  Probed on a scratch registry
        that is never started (no file is written)."""
        keep = [b"/nonexistent/pmda-mmv-probe", b"probe"]
        reg = self.fn("mmv_stats_registry")(keep[0], 0, 0)
        if not reg:
            raise MmvError("mmv_stats_registry failed (probe)")
        try:
            if self.fn("mmv_stats_add_indom")(reg, 1, None, None) < 0:
                raise MmvError("mmv_stats_add_indom failed (probe)")
            return bool(self.fn("mmv_stats_add_instance")(reg, 1, 0, keep[1]) == 0)
        finally:
            self.fn("mmv_stats_free")(reg)


@functools.cache
def library() -> Library:
    """The process's libpcp_mmv (loaded at the first call)."""
    return Library()


def _failed(what: str) -> MmvError:
    errno = ctypes.get_errno()
    return MmvError(f"{what} failed" + (f" (errno {errno})" if errno else ""))


class _Strings:
    """``b(text)``: text as UTF-8 bytes for a call, kept alive as long as this object."""

    def __init__(self) -> None:
        self.kept: list[Any] = []

    def __call__(self, text: str | None) -> bytes | None:
        if text is None:
            return None
        data = text.encode()
        self.kept.append(data)
        return data

    def keep(self, obj: Any) -> Any:
        self.kept.append(obj)
        return obj


@dataclass(frozen=True)
class ValueEntry:
    """One entry of a mapped file's VALUES section: ``desc`` (its address, the
    ``pmAtomValue *`` the value calls take), and its metric and instance entry offsets."""

    desc: int
    metric: int
    instance: int


class Mapping:
    """A started MMV file, as its writer sees it: the mapping at ``addr`` that libpcp_mmv
    returned, with the value calls.  ``types`` (metric name -> MMV type) lets :meth:`set`
    choose the call; the mapping stays until :meth:`stop` or the process ends."""

    def __init__(self, lib: Library, addr: int, types: dict[str, int], b: _Strings) -> None:
        self.lib, self.addr, self.types, self.b = lib, addr, types, b

    def lookup(self, metric: str, inst: str | None = None) -> int:
        """``mmv_lookup_value_desc``: the value of ``metric`` (instance ``inst``)."""
        desc = self.lib.fn("mmv_lookup_value_desc")(self.addr, self.b(metric), self.b(inst))
        if not desc:
            raise MmvError(f"mmv_lookup_value_desc: no value for {metric}[{inst}]")
        return int(desc)

    def set(self, metric: str, inst: str | None, value: float | str) -> Mapping:
        """Set a value by name, with the call its type takes (exact for 64-bit integers)."""
        self.set_at(self.lookup(metric, inst), self.types[metric], value)
        return self

    def set_at(self, desc: int, mtype: int, value: float | str) -> None:
        """``mmv_set_string`` for a string, else ``mmv_set_atomvalue`` with the member of
        pmAtomValue that ``mtype`` uses."""
        if mtype == layout.TYPE_STRING:
            self.set_string(desc, str(value))
            return
        atom = Atom()
        setattr(atom, ATOM_FIELD[mtype], value)
        self.lib.fn("mmv_set_atomvalue")(self.addr, desc, ctypes.byref(atom))

    def inc_atom(self, desc: int, mtype: int, value: float) -> None:
        atom = Atom()
        setattr(atom, ATOM_FIELD[mtype], value)
        self.lib.fn("mmv_inc_atomvalue")(self.addr, desc, ctypes.byref(atom))

    def set_value(self, desc: int, value: float) -> None:
        self.lib.fn("mmv_set_value")(self.addr, desc, float(value))

    def inc_value(self, desc: int, value: float) -> None:
        self.lib.fn("mmv_inc_value")(self.addr, desc, float(value))

    def set_string(self, desc: int, text: str) -> None:
        """``mmv_set_string`` with the UTF-8 length (libpcp_mmv ignores 255 bytes or more)."""
        data = text.encode()
        self.lib.fn("mmv_set_string")(self.addr, desc, data, len(data))

    def stats_inc(self, metric: str, inst: str | None = None) -> None:
        self.lib.fn("mmv_stats_inc")(self.addr, self.b(metric), self.b(inst))

    def stats_add(self, metric: str, inst: str | None, value: float) -> None:
        self.lib.fn("mmv_stats_add")(self.addr, self.b(metric), self.b(inst), float(value))

    def stats_set(self, metric: str, inst: str | None, value: float) -> None:
        self.lib.fn("mmv_stats_set")(self.addr, self.b(metric), self.b(inst), float(value))

    def stats_set_string(self, metric: str, inst: str | None, text: str) -> None:
        self.lib.fn("mmv_stats_set_string")(self.addr, self.b(metric), self.b(inst), self.b(text))

    def interval_start(
        self, desc: int | None = None, metric: str | None = None, inst: str | None = None
    ) -> int:
        """``mmv_stats_interval_start``: an ELAPSED value's interval opens (by ``desc``, or
        looked up by name); returns the value's address."""
        start = self.lib.fn("mmv_stats_interval_start")
        got = start(self.addr, desc, self.b(metric), self.b(inst))
        if not got:
            raise MmvError(f"mmv_stats_interval_start: no value for {metric}[{inst}]")
        return int(got)

    def interval_end(self, desc: int) -> None:
        self.lib.fn("mmv_stats_interval_end")(self.addr, desc)

    def values_section(self) -> tuple[int, int]:
        """(address, count) of the mapped file's VALUES section, from its TOC."""
        header = layout.HEADER.unpack(ctypes.string_at(self.addr, layout.HEADER_SIZE))
        for k in range(header[4]):
            at = self.addr + layout.HEADER_SIZE + k * layout.TOC_SIZE
            ttype, count, offset = layout.TOC.unpack(ctypes.string_at(at, layout.TOC_SIZE))
            if ttype == layout.TOC_VALUES:
                return self.addr + offset, count
        raise MmvError("the mapped file has no VALUES section")

    def values(self) -> list[ValueEntry]:
        """The VALUES section in file order, read through the mapping (libpcp_mmv lays it
        out metric by metric, instance by instance)."""
        at, count = self.values_section()
        raw = ctypes.string_at(at, count * layout.VALUE_SIZE)
        return [
            ValueEntry(at + j * layout.VALUE_SIZE, metric, instance)
            for j, (_, _, metric, instance) in enumerate(layout.VALUE.iter_unpack(raw))
        ]

    def stop(self, path: str | Path) -> None:
        """``mmv_stats_stop``: unmap (and unlink a PROCESS file)."""
        self.lib.fn("mmv_stats_stop")(self.b(str(path)), self.addr)


class Registry:
    """One file described through libpcp_mmv's registry API, then written by :meth:`start`.

    ``path`` should be absolute: libpcp_mmv puts a relative name under
    ``$PCP_TMP_DIR/mmv``.  The builder calls return the registry, so calls chain; after
    :meth:`start`, :meth:`set` and :meth:`lookup` reach the :class:`Mapping`."""

    def __init__(
        self, path: str | Path, cluster: int = 0, flags: int = 0, lib: Library | None = None
    ) -> None:
        self.lib = lib or library()
        self.b = _Strings()
        self.path = str(path)
        self.reg = self.lib.fn("mmv_stats_registry")(self.b(self.path), cluster, flags)
        if not self.reg:
            raise _failed(f"mmv_stats_registry {path}")
        self.serials: set[int] = set()
        self.types: dict[str, int] = {}
        self.mapping: Mapping | None = None

    def _check(self, rc: int, what: str) -> None:
        if rc < 0:
            raise _failed(f"{what} ({self.path})")

    def indom(
        self,
        serial: int,
        instances: Iterable[tuple[int, str]] = (),
        short: str | None = None,
        long: str | None = None,
    ) -> Registry:
        """``mmv_stats_add_indom``, then :meth:`instance` for each (internal, external)."""
        rc = self.lib.fn("mmv_stats_add_indom")(self.reg, serial, self.b(short), self.b(long))
        self._check(rc, f"mmv_stats_add_indom {serial}")
        self.serials.add(serial)
        for internal, external in instances:
            self.instance(serial, internal, external)
        return self

    def instance(self, serial: int, internal: int, external: str) -> Registry:
        """``mmv_stats_add_instance``.  Where the library's return code does not report
        success (:attr:`Library.add_instance_reports_success`), the one failure it can have
        for a valid registry, an unknown serial, is checked here instead."""
        if serial not in self.serials:
            raise MmvError(f"mmv_stats_add_instance: no indom {serial} ({self.path})")
        rc = self.lib.fn("mmv_stats_add_instance")(self.reg, serial, internal, self.b(external))
        if self.lib.add_instance_reports_success:
            self._check(rc, f"mmv_stats_add_instance {serial}/{internal}")
        return self

    def metric(
        self,
        name: str,
        item: int,
        mtype: int,
        semantics: int = layout.SEM_INSTANT,
        units: int = 0,
        indom: int | None = None,
        short: str | None = None,
        long: str | None = None,
    ) -> Registry:
        """``mmv_stats_add_metric``; ``indom`` None is ``PM_INDOM_NULL``, ``units`` a
        pmUnits word."""
        add = self.lib.fn("mmv_stats_add_metric")
        serial = INDOM_NULL if indom is None else indom
        rc = add(self.reg, self.b(name), item, mtype, semantics, Units(units), serial,
                 self.b(short), self.b(long))  # fmt: skip
        self._check(rc, f"mmv_stats_add_metric {name}")
        self.types[name] = mtype
        return self

    def _label(self, level: str, ids: tuple[int, ...], name: str, value: str, vtype: int,
               optional: bool) -> Registry:  # fmt: skip
        """``mmv_stats_add_<level>_label(registry, *ids, name, value, type, optional)``."""
        call = self.lib.fn(f"mmv_stats_add_{level}_label")
        rc = call(self.reg, *ids, self.b(name), self.b(value), vtype, int(optional))
        self._check(rc, f"mmv_stats_add_{level}_label {ids} {name}")
        return self

    def registry_label(self, name: str, value: str, vtype: int, optional: bool = False) -> Registry:
        """A label of the file's cluster; ``value`` is JSON of type ``vtype`` (LABEL_*)."""
        return self._label("registry", (), name, value, vtype, optional)

    def indom_label(
        self, serial: int, name: str, value: str, vtype: int, optional: bool = False
    ) -> Registry:
        return self._label("indom", (serial,), name, value, vtype, optional)

    def metric_label(
        self, item: int, name: str, value: str, vtype: int, optional: bool = False
    ) -> Registry:
        return self._label("metric", (item,), name, value, vtype, optional)

    def instance_label(
        self, serial: int, internal: int, name: str, value: str, vtype: int,
        optional: bool = False,
    ) -> Registry:  # fmt: skip
        return self._label("instance", (serial, internal), name, value, vtype, optional)

    def start(self) -> Registry:
        """``mmv_stats_start``: the file is written and mapped (:attr:`mapping`)."""
        addr = self.lib.fn("mmv_stats_start")(self.reg)
        if not addr:
            raise _failed(f"mmv_stats_start {self.path}")
        self.mapping = Mapping(self.lib, int(addr), self.types, self.b)
        return self

    @property
    def started(self) -> Mapping:
        if self.mapping is None:
            raise MmvError(f"{self.path}: not started")
        return self.mapping

    def lookup(self, metric: str, inst: str | None = None) -> int:
        return self.started.lookup(metric, inst)

    def set(self, metric: str, inst: str | None, value: float | str) -> Registry:
        self.started.set(metric, inst, value)
        return self

    def free(self) -> None:
        """``mmv_stats_free``: the registry goes, and with it the mapping (the file stays,
        unless it has MMV_FLAG_PROCESS)."""
        if self.reg:
            self.lib.fn("mmv_stats_free")(self.reg)
            self.reg, self.mapping = None, None


LEGACY_STRUCTS: dict[str, tuple[Any, Any, Any]] = {
    "mmv_stats_init": (_Instance, _Indom, _Metric),
    "mmv_stats2_init": (_Instance2, _Indom2, _Metric2),
}
"""The (instance, indom, metric) structures of each legacy init call."""


def legacy_init(
    symbol: str,
    path: str | Path,
    cluster: int,
    flags: int,
    metrics: Sequence[LegacyMetric],
    indoms: Sequence[LegacyIndom],
    lib: Library | None = None,
) -> Mapping:
    """The legacy APIs: ``mmv_stats_init`` (fixed 64-byte names in ``mmv_metric_t`` and
    ``mmv_instances_t``; always version 1) or ``mmv_stats2_init`` (name pointers; version 2
    when a name has 64 bytes or more), with the structures filled from the descriptions.
    Names go in as bytes, which an inline ``char[64]`` copies and a ``char *`` points to
    (kept alive with the mapping)."""
    lib = lib or library()
    instance_t, indom_t, metric_t = LEGACY_STRUCTS[symbol]
    b = _Strings()
    cindoms = b.keep((indom_t * max(1, len(indoms)))())
    for k, d in enumerate(indoms):
        insts = b.keep((instance_t * max(1, len(d.instances)))())
        for j, (internal, external) in enumerate(d.instances):
            insts[j] = instance_t(internal, b(external))
        cindoms[k] = indom_t(d.serial, len(d.instances), insts, b(d.short), b(d.long))
    cmetrics = b.keep((metric_t * max(1, len(metrics)))())
    for k, m in enumerate(metrics):
        indom = INDOM_NULL_U32 if m.indom is None else m.indom
        cmetrics[k] = metric_t(b(m.name), m.item, m.type, m.semantics, Units(m.units), indom,
                               b(m.short), b(m.long))  # fmt: skip
    addr = lib.fn(symbol)(b(str(path)), cluster, flags, ctypes.addressof(cmetrics),
                          len(metrics), ctypes.addressof(cindoms), len(indoms))  # fmt: skip
    if not addr:
        raise _failed(f"{symbol} {path}")
    return Mapping(lib, int(addr), {m.name: m.type for m in metrics}, b)
