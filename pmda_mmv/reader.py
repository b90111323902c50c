"""Open, validate and read one MMV file (mmv(5), versions 1 to 3).

Nothing in a file is trusted: every offset, count, reference and string is checked before
use, and a malformed file raises only this module's errors (:class:`MmvError` and its
subclasses).  A bad header or TOC refuses the whole file (:class:`Refused`); a bad section
or entry is skipped and recorded as a :class:`Corrupt` problem while the rest of the file
stays usable, as the C reference accepts files partially.

Values are read with ``pread(2)`` on a descriptor kept open for the life of the
:class:`MmvFile`, never through a memory mapping: a file truncated underneath yields a
short read, reported as :class:`Changed`, where a mapping would raise SIGBUS and kill the
agent.  :meth:`MmvFile.snapshot` takes one consistent copy of the values span per request
and re-checks the size and the generation pair first.
"""

from __future__ import annotations

import bisect
import json
import os
import re
import stat
import time
from array import array
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Final, Generic, TypeVar

from . import format as fmt

DEFAULT_MAX_SIZE: Final = 64 << 20
"""Largest file accepted by default (bytes): 64 MiB, about 2 million values; the largest real
file seen is under 10 MB.  A larger one (a sparse 1 TB file, or a valid file big enough to
stall the agent past pmcd's timeout while it is indexed) is refused; ``--max-size``."""

INT64_MIN: Final = -(1 << 63)
INT64_MAX: Final = (1 << 63) - 1

T = TypeVar("T")

PM_IN_NULL: Final = 0xFFFFFFFF
"""Internal instance id of a singular metric's only value, as pmcd passes it (unsigned)."""


# -- errors ---------------------------------------------------------------------------------


class MmvError(Exception):
    """A problem with an MMV file: which file, which field, at which byte offset, and why.

    Attributes: ``path`` (str), ``field`` (a dotted location such as ``metrics[3].item``),
    ``offset`` (absolute byte offset of the field in the file, -1 when not applicable),
    ``message`` (str) and ``limit`` (the bound that was broken, or None).
    """

    kind = "error"

    def __init__(
        self, path: str, field: str, offset: int, message: str, limit: int | None = None
    ) -> None:
        super().__init__(path, field, offset, message, limit)
        self.path = path
        self.field = field
        self.offset = offset
        self.message = message
        self.limit = limit

    def __str__(self) -> str:
        where = f" at offset {self.offset}" if self.offset >= 0 else ""
        return f"{self.path}: {self.field}{where}: {self.message}"

    def as_dict(self) -> dict[str, object]:
        """JSON-ready form: field, offset, message (and limit when set)."""
        out: dict[str, object] = {
            "field": self.field,
            "offset": self.offset,
            "message": self.message,
        }
        if self.limit is not None:
            out["limit"] = self.limit
        return out


class NotReady(MmvError):
    """The writer has not finished: generation 0, or g1 != g2 (mmv(5) "Generation numbers").
    Not a defect; the file is retried later."""

    kind = "not-ready"


class Refused(MmvError):
    """The file cannot be served at all: bad type, size, magic, version, TOC or cluster."""

    kind = "refused"


class Corrupt(MmvError):
    """One section or entry is malformed and was skipped; the rest of the file is served."""

    kind = "corrupt"


class Changed(MmvError):
    """The file changed since it was loaded (truncated, grown past its values, vanished or
    given a new generation); it must be loaded again before it is read."""

    kind = "changed"


# -- parsed entries -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Header:
    """The 40-byte file header (mmv(5) "Header")."""

    version: int
    g1: int
    g2: int
    tocs: int
    flags: int
    process: int
    cluster: int

    @property
    def noprefix(self) -> bool:
        return bool(self.flags & fmt.FLAG_NOPREFIX)

    @property
    def process_flag(self) -> bool:
        return bool(self.flags & fmt.FLAG_PROCESS)

    @property
    def sentinel(self) -> bool:
        return bool(self.flags & fmt.FLAG_SENTINEL)

    @property
    def created(self) -> float | None:
        """Creation time read from g1 (:func:`~.format.generation_time`), in seconds since
        the epoch; None when g1 is no time (writers that count generations)."""
        return fmt.generation_time(self.g1, time.time())


@dataclass(frozen=True, slots=True)
class Toc:
    """One TOC entry (mmv(5) "TOC"): section ``type``, entry ``count`` and section ``offset``;
    ``at`` is the offset of the TOC entry itself."""

    index: int
    type: int
    count: int
    offset: int
    at: int


@dataclass(slots=True)
class Instance:
    """One instance: internal id (int32) and external name; ``offset`` of its entry."""

    internal: int
    external: str
    offset: int


@dataclass(slots=True)
class Indom:
    """One instance domain of the file, keyed by its file-local ``serial``.

    ``positions`` maps internal id -> index in ``instances`` (the value index uses it)."""

    serial: int
    offset: int
    instances: list[Instance]
    shorthelp: str | None
    longhelp: str | None
    positions: dict[int, int] = field(default_factory=dict)


@dataclass(slots=True)
class Metric:
    """One metric entry.  ``indom`` is the file-local serial, or None when singular.

    ``slots`` is the value index: for instance position p (see :attr:`Indom.positions`;
    position 0 for a singular metric), the offset of the value entry relative to the
    snapshot base, or -1 when the file has no value for it."""

    name: str
    item: int
    type: int
    semantics: int
    dimension: int
    indom: int | None
    shorthelp: str | None
    longhelp: str | None
    offset: int
    slots: array[int] = field(default_factory=lambda: array("q"))
    stride: int = 0

    @property
    def value_count(self) -> int:
        return sum(1 for s in self.slots if s >= 0)

    def find_stride(self) -> None:
        """Set ``stride`` when every instance has a value and the value entries are evenly
        spaced and 8-byte aligned in the span (libpcp_mmv writes a metric's values in
        instance order), so that :meth:`MmvFile.column` can read them in one slice."""
        s = self.slots
        if not s:
            self.stride = 0
            return
        step = s[1] - s[0] if len(s) > 1 else fmt.VALUE_SIZE
        ok = step > 0 and step % 8 == 0 and s[0] % 8 == 0
        self.stride = step if ok and s == array("q", range(s[0], s[0] + len(s) * step, step)) else 0


@dataclass(slots=True)
class Label:
    """One label entry: ``kind`` is one of format.LABEL_{INDOM,CLUSTER,ITEM,INSTANCES};
    ``identity`` a serial, cluster or item; ``internal`` an instance id or -1; ``payload``
    the JSON object text; ``optional`` the on-disk PM_LABEL_OPTIONAL bit."""

    kind: int
    identity: int
    internal: int
    payload: str
    optional: bool
    offset: int


@dataclass(slots=True)
class Snapshot:
    """One consistent copy of a file's values span, taken per request.

    ``data`` holds the bytes from the file's first to its last value entry; value offsets
    in :attr:`Metric.slots` index into it.  ``sentinel`` is the live SENTINEL flag and
    ``now_us`` the time of the copy in microseconds (for ELAPSED)."""

    data: bytes
    sentinel: bool
    now_us: float


# -- the file -------------------------------------------------------------------------------


class MmvFile:
    """One validated MMV file, open for reading values.

    Build with :meth:`open`; release with :meth:`close` (or use as a context manager).
    Attributes: ``path``, ``name`` (base name), ``header``, ``toc``, ``sections`` (the TOC
    entries whose sections were accepted), ``indoms``
    (serial -> :class:`Indom`), ``metrics`` (accepted, in file order), ``labels``,
    ``problems`` (skipped sections and entries), ``size``, ``uid``, ``inode``
    ((st_dev, st_ino)) and ``mtime_ns``.
    """

    def __init__(
        self, path: str, fd: int, st: os.stat_result, data: bytes, name: str | None = None
    ) -> None:
        self.path = path
        self.name = name or os.path.basename(path)
        self.fd = -1  # owned only once the file validated (open() closes it otherwise)
        self.size = st.st_size
        self.uid = st.st_uid
        self.inode = (st.st_dev, st.st_ino)
        self.mtime_ns = st.st_mtime_ns
        self.toc: list[Toc] = []
        self.sections: list[Toc] = []
        self.indoms: dict[int, Indom] = {}
        self.metrics: list[Metric] = []
        self.labels: list[Label] = []
        self.label_index: dict[tuple[int, int, int], list[Label]] = {}
        self.problems: list[Corrupt] = []
        self.unlisted = 0  # problems past fmt.MAX_PROBLEMS, counted, not recorded
        self.base = 0
        self.span = 0
        self.header = _Parser(self, data).parse()
        self.fd = fd

    # -- construction

    @classmethod
    def open(
        cls, path: str, *, max_size: int = DEFAULT_MAX_SIZE, name: str | None = None
    ) -> MmvFile:
        """Open and validate ``path``; ``name`` (default: its base name) names the file in
        the namespace, for a file reached through a symlink.

        Raises :class:`NotReady` (generation 0 or in flux), :class:`Refused` (not a regular
        file, unreadable, too small or large, bad magic, version, TOC or cluster) or
        :class:`Changed` (the file changed while it was read).  Never blocks on a FIFO.
        """
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOFOLLOW)
        except OSError as e:
            raise Refused(path, "file", -1, f"cannot open: {e.strerror}") from None
        try:
            st = os.fstat(fd)
            _check_stat(path, st, max_size)
            read_header(path, _pread_exact(path, fd, fmt.HEADER_SIZE, 0), st.st_size)
            data = _pread_exact(path, fd, st.st_size, 0)
            return cls(path, fd, st, data, name)
        except BaseException:
            os.close(fd)
            raise

    def close(self) -> None:
        """Release the descriptor; later reads raise :class:`Changed`."""
        fd, self.fd = self.fd, -1
        if fd >= 0:
            os.close(fd)

    def __enter__(self) -> MmvFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()

    # -- state

    @property
    def status(self) -> str:
        """``ok`` or ``partial`` (some section or entry was skipped)."""
        return "partial" if self.problems else "ok"

    @property
    def value_count(self) -> int:
        """Number of (metric, instance) values the index holds."""
        return sum(m.value_count for m in self.metrics)

    def problem(self, field: str, offset: int, message: str, limit: int | None = None) -> None:
        """Record one skipped section or entry; past :data:`fmt.MAX_PROBLEMS` only count it
        (:meth:`_Parser.parse` then adds one summary problem)."""
        if len(self.problems) < fmt.MAX_PROBLEMS:
            self.problems.append(Corrupt(self.path, field, offset, message, limit))
        else:
            self.unlisted += 1

    def labels_for(self, kind: int, identity: int, internal: int = -1) -> list[Label]:
        """The accepted labels of one PCP label set, in file order: ``kind`` (one of
        format.LABEL_*), its cluster, item or indom serial, and for instance labels the
        instance's internal id."""
        key = (kind, identity, internal if kind == fmt.LABEL_INSTANCES else -1)
        return self.label_index.get(key, [])

    def check_generation(self) -> None:
        """Re-check size, link count and generation pair; raise :class:`Changed` if the file
        was truncated or grown, unlinked (a writer restarted under the same name) or given a
        new generation since it was loaded."""
        self._live_header()

    def _live_header(self) -> bytes:
        if self.fd < 0:
            raise Changed(self.path, "file", -1, "closed")
        try:
            st = os.fstat(self.fd)
        except OSError as e:
            raise Changed(self.path, "file", -1, f"fstat failed: {e.strerror}") from None
        if st.st_size != self.size:
            raise Changed(self.path, "file", -1, f"size changed from {self.size} to {st.st_size}")
        if st.st_nlink == 0:
            raise Changed(self.path, "file", -1, "unlinked (replaced or removed)")
        head = _pread_exact(self.path, self.fd, fmt.HEADER_SIZE, 0)
        g1, g2 = fmt.GENERATION.unpack_from(head, fmt.GENERATION_OFFSET)
        if g1 != self.header.g1 or g2 != self.header.g2:
            raise Changed(
                self.path,
                "header.generation",
                fmt.GENERATION_OFFSET,
                f"generation changed from {self.header.g1} to g1={g1} g2={g2}",
            )
        return head

    # -- values

    def snapshot(self) -> Snapshot:
        """Copy the live values span after re-checking size, link count and generation.

        Raises :class:`Changed` when the file was truncated, unlinked, replaced in place or
        given a new generation since it was loaded."""
        flags = fmt.HEADER.unpack(self._live_header())[5]
        data = _pread_exact(self.path, self.fd, self.span, self.base) if self.span else b""
        return Snapshot(data, bool(flags & fmt.FLAG_SENTINEL), time.time() * 1e6)

    def read_string(self, offset: int) -> str | None:
        """The live string entry at ``offset``: its text, or None when the offset is out of
        bounds or the entry is not NUL-terminated within 256 bytes."""
        if offset < fmt.HEADER_SIZE or offset + fmt.STRING_SIZE > self.size or self.fd < 0:
            return None
        try:
            raw = os.pread(self.fd, fmt.STRING_SIZE, offset)
        except OSError:
            return None
        end = raw.find(b"\0")
        return None if end < 0 else raw[:end].decode("utf-8", "replace")

    def decoder(self, mtype: int) -> Callable[[Snapshot, int], object]:
        """A function ``(snapshot, slot) -> value`` for metrics of ``mtype``: int, float or
        str, :data:`NO_VALUE` when the SENTINEL flag marks it absent, or
        :data:`UNSUPPORTED` for NOSUPPORT (and any type this reader does not serve)."""
        return _decoder(self, mtype)

    @staticmethod
    def sliced(snap: Snapshot, metric: Metric) -> bool:
        """Whether :meth:`column` reads ``metric`` in one slice of ``snap``: then its values
        are all plain numbers (no marker)."""
        return (
            metric.type in _CAST
            and not snap.sentinel
            and metric.stride > 0
            and not len(snap.data) % 8
        )

    def column(self, snap: Snapshot, metric: Metric) -> list[object]:
        """The values of ``metric`` in ``snap``, by instance position (one for a singular
        metric): int, float or str, :data:`NO_VALUE`, :data:`UNSUPPORTED`, or
        :data:`MISSING` where the file has no value entry.  Numeric metrics whose value
        entries are evenly spaced are read with one slice of the snapshot."""
        if not self.sliced(snap, metric):
            decode = self.decoder(metric.type)
            return [decode(snap, s) if s >= 0 else MISSING for s in metric.slots]
        view = memoryview(snap.data).cast(_CAST[metric.type])  # type: ignore[call-overload]
        first, step = metric.slots[0] // view.itemsize, metric.stride // view.itemsize
        values: list[object] = view[first : first + step * len(metric.slots) : step].tolist()
        return values

    def values(
        self, snap: Snapshot | None = None
    ) -> Iterator[tuple[Metric, Instance | None, object]]:
        """Every (metric, instance or None, value) currently held, in file order."""
        snap = snap or self.snapshot()
        for metric in self.metrics:
            insts = self.indoms[metric.indom].instances if metric.indom is not None else [None]
            for pos, value in enumerate(self.column(snap, metric)):
                if value is not MISSING:
                    yield metric, insts[pos], value


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
    fmt.TYPE_I32: "i",
    fmt.TYPE_U32: "I",
    fmt.TYPE_I64: "q",
    fmt.TYPE_U64: "Q",
    fmt.TYPE_FLOAT: "f",
    fmt.TYPE_DOUBLE: "d",
}
"""memoryview formats of the numeric types read in bulk (native, first bytes of the union)."""


def _decoder(mf: MmvFile, mtype: int) -> Callable[[Snapshot, int], object]:
    if mtype == fmt.TYPE_STRING:
        extra = fmt.VALUE_EXTRA.unpack_from

        def string(snap: Snapshot, slot: int) -> object:
            text = mf.read_string(extra(snap.data, slot + fmt.EXTRA_OFFSET)[0])
            if text is None:
                return UNSUPPORTED
            return NO_VALUE if snap.sentinel and not text else text

        return string
    if mtype == fmt.TYPE_ELAPSED:
        pair = fmt.VALUE.unpack_from

        def elapsed(snap: Snapshot, slot: int) -> object:
            raw, ext, _, _ = pair(snap.data, slot)
            if snap.sentinel and raw == fmt.SENTINEL_BYTES:
                return NO_VALUE
            value: int = fmt.VALUE_FORMAT[fmt.TYPE_ELAPSED].unpack_from(raw)[0]
            if ext < 0:
                value += int(snap.now_us + ext)
            return value if INT64_MIN <= value <= INT64_MAX else UNSUPPORTED

        return elapsed
    if mtype in (fmt.TYPE_FLOAT, fmt.TYPE_DOUBLE):
        unpack_real = fmt.VALUE_FORMAT[mtype].unpack_from

        def real(snap: Snapshot, slot: int) -> object:
            v: float = unpack_real(snap.data, slot)[0]
            return NO_VALUE if snap.sentinel and v != v else v

        return real
    if mtype in fmt.VALUE_FORMAT:
        unpack_int = fmt.VALUE_FORMAT[mtype].unpack_from
        data8 = fmt.VALUE_FORMAT[fmt.TYPE_U64].unpack_from
        all_ones = (1 << 64) - 1

        def integer(snap: Snapshot, slot: int) -> object:
            if snap.sentinel and data8(snap.data, slot)[0] == all_ones:
                return NO_VALUE
            return unpack_int(snap.data, slot)[0]

        return integer
    return lambda snap, slot: UNSUPPORTED


# -- helpers --------------------------------------------------------------------------------


def _check_stat(path: str, st: os.stat_result, max_size: int) -> None:
    if not stat.S_ISREG(st.st_mode):
        raise Refused(path, "file", -1, "not a regular file")
    if st.st_size == 0:  # libpcp_mmv creates the file, then sizes it: retry it
        raise NotReady(path, "file.size", 0, "size 0, not written yet")
    if st.st_size < fmt.HEADER_SIZE:
        raise Refused(
            path,
            "file.size",
            0,
            f"size {st.st_size} too small, expecting at least {fmt.HEADER_SIZE}",
            fmt.HEADER_SIZE,
        )
    if st.st_size > max_size:
        raise Refused(path, "file.size", 0, f"size {st.st_size} exceeds {max_size}", max_size)


def _pread_exact(path: str, fd: int, length: int, offset: int) -> bytes:
    try:
        data = os.pread(fd, length, offset)
    except OSError as e:
        raise Changed(path, "file", offset, f"read failed: {e.strerror}") from None
    if len(data) != length:
        raise Changed(path, "file", offset, f"short read: {len(data)} of {length} bytes")
    return data


def _cstring(raw: bytes, errors: str = "replace") -> str | None:
    """The NUL-terminated text at the start of ``raw`` (None without a NUL).  Text PCP
    passes on as a Python str (help, strings, labels) replaces bytes that are not UTF-8;
    instance names keep them (``errors="surrogateescape"``) to be served byte for byte."""
    end = raw.find(b"\0")
    return None if end < 0 else raw[:end].decode("utf-8", errors)


_NAME_CHARS: Final = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.")


def name_problem(name: str) -> str | None:
    """Why ``name`` is not a servable metric name, or None when it is valid.

    The reference's character rule (``[A-Za-z0-9_.]``, mmv.c verify_metric_name) plus one
    of ours: no empty component (``a..b``, a leading or trailing dot), which no PMNS
    lookup could reach."""
    if not name:
        return "empty name"
    for i, ch in enumerate(name):
        if ch not in _NAME_CHARS:
            return f"invalid character {ch!r} at position {i}"
    for part in name.split("."):
        if not part:
            return "empty name component"
    return None


def read_header(path: str, head: bytes, size: int) -> Header:
    """Validate the header in ``head`` (at least 40 bytes) of a file of ``size`` bytes, in the
    reference's order (mmv.c create_client_stat).

    Raises :class:`Refused` (magic, version, TOC count or size, cluster) or :class:`NotReady`
    (g1 is 0, or g1 != g2)."""
    magic, version, g1, g2, tocs, flags, process, cluster = fmt.HEADER.unpack_from(head)
    if magic == b"\0\0\0\0" and g1 == 0:
        # libpcp_mmv sizes the file, then writes the header through a mapping: no event,
        # maybe no mtime change; retry it like any file in flux.
        raise NotReady(path, "header.magic", 0, "header not written yet")
    if magic != fmt.MAGIC:
        raise Refused(path, "header.magic", 0, f"magic {magic!r} is not 'MMV\\0'")
    if version not in fmt.VERSIONS:
        raise Refused(path, "header.version", 4, f"version {version} unsupported")
    if g1 == 0:
        raise NotReady(path, "header.g1", 8, "generation 0, no data yet")
    if g1 != g2:
        raise NotReady(path, "header.g2", 16, f"generation in flux, g1={g1} g2={g2}")
    if tocs < 2:
        raise Refused(path, "header.tocs", 24, f"{tocs} TOC entries, expecting at least 2", 2)
    if tocs > fmt.MAX_TOCS:
        why = f"{tocs} TOC entries, more than {fmt.MAX_TOCS}"
        raise Refused(path, "header.tocs", 24, why, fmt.MAX_TOCS)
    need = fmt.HEADER_SIZE + tocs * fmt.TOC_SIZE
    if need > size:
        limit = (size - fmt.HEADER_SIZE) // fmt.TOC_SIZE
        why = f"{tocs} TOC entries need {need} bytes, file has {size}"
        raise Refused(path, "header.tocs", 24, why, limit)
    if not 0 <= cluster <= fmt.MAX_CLUSTER:
        why = f"cluster {cluster} out of range"
        raise Refused(path, "header.cluster", 36, why, fmt.MAX_CLUSTER)
    return Header(version, g1, g2, tocs, flags, process, cluster)


# -- the parser -----------------------------------------------------------------------------


class _Parser:
    """Validates ``data`` (the whole file) into ``mf``; header and TOC errors raise."""

    def __init__(self, mf: MmvFile, data: bytes) -> None:
        self.mf = mf
        self.data = data
        self.size = len(data)
        self.path = mf.path
        self.version = 0
        self.sections = _Ranges[Toc]()  # accepted sections
        self.claimed = _Ranges[int]()  # instance ranges of accepted indoms -> indoms[i]
        self.items: set[int] = set()  # items of the accepted metrics
        self.instance_at: dict[int, tuple[Indom, int]] = {}  # entry offset -> (indom, pos)
        self.metric_at: dict[int, Metric] = {}
        self.skipped_metrics: set[int] = set()
        self.tried: set[int] = set()  # items whose values were tried as one run (values)
        self.order: dict[int, list[int]] | None = None  # indom serial -> instance entries
        self.rejected_metrics: list[Toc] = []  # METRICS sections already reported
        # What was skipped and reported once, so that references to it are not reported again
        self.rejected_indoms = False
        self.skipped_serials: set[int] = set()
        self.skipped_instances: set[int] = set()
        self.names: dict[
            int, set[str]
        ] = {}  # indom entry offset -> external names seen  # entry offsets already reported

    def parse(self) -> Header:
        header = self.header()
        self.version = header.version
        self.mf.header = header
        self.mf.toc = self.tocs(header.tocs)
        by_type: dict[int, list[Toc]] = {}
        for toc in self.mf.toc:
            if self.accept_section(toc):
                by_type.setdefault(toc.type, []).append(toc)
                self.mf.sections.append(toc)
            elif toc.type == fmt.TOC_METRICS:
                self.rejected_metrics.append(toc)
            elif toc.type == fmt.TOC_INDOMS:
                self.rejected_indoms = True
        for toc in by_type.get(fmt.TOC_INDOMS, []):
            self.indoms(toc)
        for toc in by_type.get(fmt.TOC_METRICS, []):
            self.metrics(toc)
        self.metric_slots()
        self.value_span(by_type.get(fmt.TOC_VALUES, []))
        for toc in by_type.get(fmt.TOC_VALUES, []):
            self.values(toc)
        for toc in by_type.get(fmt.TOC_LABELS, []):
            self.labels(toc, header)
        self.index_labels()
        for metric in self.mf.metrics:
            metric.find_stride()
        if self.mf.unlisted:
            self.mf.problems.append(
                Corrupt(
                    self.path,
                    "file",
                    -1,
                    f"{self.mf.unlisted} more problems not listed (the first "
                    f"{fmt.MAX_PROBLEMS} are)",
                    fmt.MAX_PROBLEMS,
                )
            )
        return header

    # -- header and TOC (fatal)

    def header(self) -> Header:
        header = read_header(self.path, self.data, self.size)
        if header.flags & ~fmt.FLAGS_KNOWN:
            unknown = header.flags & ~fmt.FLAGS_KNOWN
            self.mf.problem("header.flags", 28, f"unknown flag bits {unknown:#x} ignored")
        return header

    def tocs(self, count: int) -> list[Toc]:
        out = []
        for i in range(count):
            at = fmt.HEADER_SIZE + i * fmt.TOC_SIZE
            ttype, tcount, offset = fmt.TOC.unpack_from(self.data, at)
            out.append(Toc(i, ttype, tcount, offset, at))
        return out

    # -- sections

    def accept_section(self, toc: Toc) -> bool:
        """Range-check one TOC entry's section; record a problem and skip it when bad."""
        where = f"toc[{toc.index}]"
        if toc.type not in fmt.TOC_NAMES:
            self.mf.problem(f"{where}.type", toc.at, f"bad TOC type {toc.type:#x}")
            return False
        limit = {
            fmt.TOC_METRICS: fmt.MAX_ITEM,
            fmt.TOC_INDOMS: fmt.MAX_SERIAL,
            fmt.TOC_LABELS: fmt.MAX_LABELS,
        }.get(toc.type)
        name = fmt.TOC_NAMES[toc.type]
        if limit is not None and toc.count > limit:
            self.mf.problem(
                f"{where}.count", toc.at + 4, f"{name} count {toc.count} > {limit}", limit
            )
            return False
        if toc.count == 0:
            return False
        esize = fmt.ENTRY_SIZE[(toc.type, fmt.layout(self.version))]
        start, end = toc.offset, toc.offset + toc.count * esize
        first = fmt.HEADER_SIZE + self.mf.header.tocs * fmt.TOC_SIZE
        if start < first or end > self.size:
            self.mf.problem(
                f"{where}.offset",
                toc.at + 8,
                f"{name} section [{start}, {end}) outside the data area [{first}, {self.size})",
                self.size,
            )
            return False
        other = self.sections.overlapping(start, end)
        if other is not None:
            ostart, oend, prior = other
            self.mf.problem(
                f"{where}.offset",
                toc.at + 8,
                f"{name} section [{start}, {end}) overlaps toc[{prior.index}] [{ostart}, {oend})",
            )
            return False
        self.sections.add(start, end, toc)
        return True

    def string(
        self, offset: int, where: str, at: int, optional: bool, errors: str = "replace"
    ) -> str | None:
        """Text of the string entry at ``offset``; problems are recorded, None returned."""
        if offset == 0:
            if not optional:
                self.mf.problem(where, at, "string offset 0 (absent) where a string is required")
            return None
        if offset < fmt.HEADER_SIZE or offset + fmt.STRING_SIZE > self.size:
            self.mf.problem(
                where,
                at,
                f"string offset {offset} outside the file (needs {fmt.STRING_SIZE} bytes)",
                self.size - fmt.STRING_SIZE,
            )
            return None
        text = _cstring(self.data[offset : offset + fmt.STRING_SIZE], errors)
        if text is None:
            self.mf.problem(
                where,
                at,
                f"string at {offset} not NUL-terminated within {fmt.STRING_SIZE} bytes",
                fmt.STRING_SIZE,
            )
        return text

    def help(self, offset: int, where: str, at: int) -> str | None:
        """Help text; a slot filled to its last byte with no NUL (as Speed writes) is served
        as its first STRING_SIZE - 1 bytes, as the C agent does, and noted (partial)."""
        inside = offset >= fmt.HEADER_SIZE and offset + fmt.STRING_SIZE <= self.size
        raw = self.data[offset : offset + fmt.STRING_SIZE] if inside else b""
        if raw and b"\0" not in raw:
            self.mf.problem(
                where,
                at,
                f"string at {offset} not NUL-terminated within {fmt.STRING_SIZE} bytes, "
                f"served as its first {fmt.STRING_SIZE - 1} bytes (as the C agent)",
                fmt.STRING_SIZE,
            )
            return _cstring(raw[:-1] + b"\0")
        return self.string(offset, where, at, optional=True)

    def indoms(self, toc: Toc) -> None:
        isize = fmt.ENTRY_SIZE[(fmt.TOC_INSTANCES, fmt.layout(self.version))]
        for i in range(toc.count):
            at = toc.offset + i * fmt.INDOM.size
            where = f"indoms[{i}]"
            serial, count, offset, short, long_ = fmt.INDOM.unpack_from(self.data, at)
            if serial > fmt.MAX_SERIAL:
                self.mf.problem(
                    f"{where}.serial", at, f"serial {serial} > {fmt.MAX_SERIAL}", fmt.MAX_SERIAL
                )
                self.skipped_serials.add(serial)
                continue
            if serial in self.mf.indoms:
                self.mf.problem(f"{where}.serial", at, f"duplicate serial {serial}, ignored")
                continue
            end = offset + count * isize
            if count and (offset < fmt.HEADER_SIZE or end > self.size):
                self.mf.problem(
                    f"{where}.offset",
                    at + 8,
                    f"instances [{offset}, {end}) outside the file",
                    self.size,
                )
                self.skipped_serials.add(serial)
                continue
            other = self.claimed.overlapping(offset, end) if count else None
            if other is not None:  # each instance entry is checked once, for one indom
                ostart, oend, j = other
                self.mf.problem(
                    f"{where}.offset",
                    at + 8,
                    f"instances [{offset}, {end}) overlap those of indoms[{j}] [{ostart}, {oend})",
                )
                self.skipped_serials.add(serial)
                continue
            if count:
                self.claimed.add(offset, end, i)
            indom = Indom(
                serial,
                at,
                [],
                self.help(short, f"{where}.shorthelp", at + 16),
                self.help(long_, f"{where}.longhelp", at + 24),
            )
            for k in range(count):
                if not self.instance(indom, offset + k * isize, f"{where}.instances[{k}]"):
                    self.skipped_instances.add(offset + k * isize)
            self.mf.indoms[serial] = indom

    def instance(self, indom: Indom, at: int, where: str) -> bool:
        """Add one instance entry to ``indom``; False (problem recorded) when skipped."""
        if self.version == 1:
            back, internal, raw = fmt.INSTANCE_V1.unpack_from(self.data, at)
            external = _cstring(raw, "surrogateescape")
            if external is None:
                self.mf.problem(
                    f"{where}.external",
                    at + 16,
                    f"name not NUL-terminated within {fmt.NAME_SIZE} bytes",
                    fmt.NAME_SIZE,
                )
                return False
        else:
            back, internal, soff = fmt.INSTANCE_V2.unpack_from(self.data, at)
            external = self.string(
                soff, f"{where}.external", at + 16, optional=False, errors="surrogateescape"
            )
            if external is None:
                return False
        if back != indom.offset:
            self.mf.problem(
                f"{where}.indom",
                at,
                f"back-reference {back} is not its indom entry at {indom.offset}, ignored",
            )
            return False
        if not external:
            self.mf.problem(f"{where}.external", at + 16, "empty instance name")
            return False
        if internal in indom.positions:
            self.mf.problem(f"{where}.internal", at + 12, f"duplicate instance id {internal}")
            return False
        if external in self.names.setdefault(indom.offset, set()):
            self.mf.problem(f"{where}.external", at + 16, f"duplicate instance name {external!r}")
            return False
        self.names[indom.offset].add(external)
        indom.positions[internal] = len(indom.instances)
        inst = Instance(internal, external, at)
        indom.instances.append(inst)
        self.instance_at[at] = (indom, indom.positions[internal])
        return True

    def metrics(self, toc: Toc) -> None:
        entry = fmt.METRIC_V1 if self.version == 1 else fmt.METRIC_V2
        items = self.items
        for i in range(toc.count):
            at = toc.offset + i * entry.size
            metric = self.metric(entry.unpack_from(self.data, at), at, f"metrics[{i}]", items)
            if metric is None:
                self.skipped_metrics.add(at)
                continue
            items.add(metric.item)
            self.mf.metrics.append(metric)
            self.metric_at[at] = metric

    def metric(
        self, fields: tuple[Any, ...], at: int, where: str, items: set[int]
    ) -> Metric | None:
        """One metric entry, or None (with the problem recorded) when it must be skipped."""
        raw, item, mtype, sem, dim, indom, short, long_ = fields
        base = 64 if self.version == 1 else 8  # offset of ``item`` in the entry
        if self.version == 1:
            name = _cstring(raw)
            if name is None:
                why = f"name not NUL-terminated within {fmt.NAME_SIZE} bytes"
                self.mf.problem(f"{where}.name", at, why, fmt.NAME_SIZE)
                return None
        else:
            text = self.string(raw, f"{where}.name", at, optional=False)
            if text is None:
                return None
            name = text
        indom &= 0xFFFFFFFF
        serial: int | None = None if indom in fmt.INDOM_NONE else indom
        reported = self.rejected_indoms or serial in self.skipped_serials
        if serial is not None and serial not in self.mf.indoms and reported:
            return None  # its indom (or their section) was reported
        checks: list[tuple[str | None, str, int, int | None]] = [
            (name_problem(name), "name", 0, None),
            (
                f"item {item} > {fmt.MAX_ITEM}" if item > fmt.MAX_ITEM else None,
                "item",
                base,
                fmt.MAX_ITEM,
            ),
            (f"duplicate item {item}, ignored" if item in items else None, "item", base, None),
            (None if mtype in fmt.TYPE_NAMES else f"unknown type {mtype}", "type", base + 4, None),
            (
                None if sem in fmt.SEMANTICS else f"unknown semantics {sem}",
                "semantics",
                base + 8,
                None,
            ),
            (
                f"indom serial {serial} is not defined in this file"
                if serial is not None and serial not in self.mf.indoms
                else None,
                "indom",
                base + 16,
                None,
            ),
        ]
        for problem, fname, off, limit in checks:
            if problem:
                detail = f"metric name {name!r}: {problem}" if fname == "name" else problem
                self.mf.problem(f"{where}.{fname}", at + off, detail, limit)
                return None
        return Metric(
            name,
            item,
            mtype,
            sem,
            dim,
            serial,
            self.help(short, f"{where}.shorthelp", at + base + 24),
            self.help(long_, f"{where}.longhelp", at + base + 32),
            at,
        )

    def metric_slots(self) -> None:
        for m in self.mf.metrics:
            n = 1 if m.indom is None else len(self.mf.indoms[m.indom].instances)
            m.slots = array("q", [-1]) * n

    def value_span(self, tocs: list[Toc]) -> None:
        """Base and length of the span holding every accepted VALUES section."""
        if tocs:
            self.mf.base = min(t.offset for t in tocs)
            self.mf.span = max(t.offset + t.count * fmt.VALUE_SIZE for t in tocs) - self.mf.base

    def values(self, toc: Toc) -> None:
        """Index a VALUES section in one pass over its (metric, instance) offset pairs.
        An entry that is not plainly valid, and every string value, goes through
        :meth:`value`, which checks it in full and records its problem."""
        end = toc.offset + toc.count * fmt.VALUE_SIZE
        words = memoryview(self.data)[toc.offset : end].cast("Q")  # native, as fmt.VALUE
        metric_at, instance_at = self.metric_at, self.instance_at
        at, base = toc.offset, self.mf.base
        moffs, ioffs = words[2::4].tolist(), words[3::4].tolist()
        i, count = 0, len(moffs)
        while i < count:
            moff, ioff = moffs[i], ioffs[i]
            metric = metric_at.get(moff)
            run = self.run(metric, moffs, ioffs, i) if metric is not None else 0
            if (
                run and metric is not None
            ):  # a whole metric, instance by instance, as libpcp_mmv lays it out
                step = fmt.VALUE_SIZE
                metric.slots = array("q", range(at - base, at - base + run * step, step))
                at += run * step
                i += run
                continue
            i += 1
            if metric is not None and metric.type != fmt.TYPE_STRING:
                if metric.indom is None:
                    pos = 0
                else:
                    found = instance_at.get(ioff)
                    pos = found[1] if found is not None and found[0].serial == metric.indom else -1
                if pos >= 0 and metric.slots[pos] < 0:
                    metric.slots[pos] = at - base
                    at += fmt.VALUE_SIZE
                    continue
            self.value(at, f"values[{i - 1}]")
            at += fmt.VALUE_SIZE

    def run(self, metric: Metric, moffs: list[int], ioffs: list[int], i: int) -> int:
        """How many values from ``i`` on are the whole of ``metric``, one per instance in
        its indom's order with none set before (0 when they are not: checked one value at
        a time).  Tried once per metric, so a file cannot make it cost more than its size."""
        if metric.indom is None or metric.type == fmt.TYPE_STRING or metric.item in self.tried:
            return 0
        self.tried.add(metric.item)
        order = self.instance_order(metric.indom)
        k = len(order)
        if not k or k != len(metric.slots) or ioffs[i : i + k] != order:
            return 0
        if moffs[i : i + k] != [moffs[i]] * k:
            return 0
        return k if metric.slots.count(-1) == k else 0

    def instance_order(self, serial: int) -> list[int]:
        """Entry offsets of indom ``serial``'s instances, by position."""
        if self.order is None:
            self.order = {}
            for off, (indom, pos) in self.instance_at.items():
                order = self.order.get(indom.serial)
                if order is None:  # not setdefault: its default would be built per instance
                    order = self.order[indom.serial] = [-1] * len(indom.instances)
                order[pos] = off
        return self.order.get(serial, [])

    def value(self, at: int, where: str) -> None:
        _, extra, moff, ioff = fmt.VALUE.unpack_from(self.data, at)
        metric = self.metric_at.get(moff)
        if metric is None and (moff in self.skipped_metrics or self.rejected_metrics):
            return  # the metric entry or its section was reported
        if metric is None:
            self.mf.problem(
                f"{where}.metric", at + 16, f"offset {moff} is not an accepted metric entry"
            )
            return
        if metric.indom is None:
            pos = 0
        else:
            found = self.instance_at.get(ioff)
            if found is None and (ioff in self.skipped_instances or self.rejected_indoms):
                return  # the instance entry or its section was reported
            if found is None or found[0].serial != metric.indom:
                self.mf.problem(
                    f"{where}.instance",
                    at + 24,
                    f"offset {ioff} is not an "
                    f"instance of indom {metric.indom} (metric {metric.name})",
                )
                return
            pos = found[1]
        if metric.slots[pos] >= 0:
            self.mf.problem(f"{where}", at, f"duplicate value for metric {metric.name}, ignored")
            return
        if (
            metric.type == fmt.TYPE_STRING
            and self.string(extra, f"{where}.extra", at + 8, optional=False) is None
        ):
            return
        metric.slots[pos] = at - self.mf.base

    def labels(self, toc: Toc, header: Header) -> None:
        items = self.items
        for i in range(toc.count):
            at = toc.offset + i * fmt.LABEL.size
            where = f"labels[{i}]"
            flags, identity, internal, raw = fmt.LABEL.unpack_from(self.data, at)
            kind = flags & ~fmt.LABEL_OPTIONAL
            if kind not in fmt.LABEL_KINDS:
                self.mf.problem(f"{where}.flags", at, f"bad label flags {flags:#x}")
                continue
            payload = _cstring(raw)
            if payload is None:
                self.mf.problem(
                    f"{where}.payload",
                    at + 12,
                    f"payload not NUL-terminated within {fmt.LABEL_PAYLOAD_SIZE} bytes",
                    fmt.LABEL_PAYLOAD_SIZE,
                )
                continue
            why = _label_problem(payload)
            if why:
                self.mf.problem(f"{where}.payload", at + 12, why)
                continue
            why = self.label_target(kind, identity, internal, header, items)
            if why:
                self.mf.problem(f"{where}.identity", at + 4, why)
                continue
            self.mf.labels.append(
                Label(kind, identity, internal, payload, bool(flags & fmt.LABEL_OPTIONAL), at)
            )

    def index_labels(self) -> None:
        """Group the labels by the PCP label set they belong to (:meth:`MmvFile.labels_for`)
        and drop, with one problem each, the sets that merge into more labels or more JSON
        than libpcp accepts (it would reject the whole set at every request)."""
        index = self.mf.label_index
        for lb in self.mf.labels:
            internal = lb.internal if lb.kind == fmt.LABEL_INSTANCES else -1
            index.setdefault((lb.kind, lb.identity, internal), []).append(lb)
        for key, group in list(index.items()):
            why = label_set_problem(group)
            if why is None:
                continue
            kind, identity, internal = key
            what = f"{fmt.LABEL_KINDS[kind]} {identity}"
            what += f" instance {internal}" if kind == fmt.LABEL_INSTANCES else ""
            self.mf.problem(
                "labels", group[0].offset, f"{len(group)} labels of {what}: {why}, not served"
            )
            del index[key]
        kept = {id(lb) for group in index.values() for lb in group}
        self.mf.labels = [lb for lb in self.mf.labels if id(lb) in kept]

    def label_target(
        self, kind: int, identity: int, internal: int, header: Header, items: set[int]
    ) -> str | None:
        if kind == fmt.LABEL_CLUSTER:
            return (
                None
                if identity == header.cluster
                else (f"cluster label for cluster {identity}, file asks for {header.cluster}")
            )
        if kind == fmt.LABEL_ITEM:
            return None if identity in items else f"item label for unknown item {identity}"
        indom = self.mf.indoms.get(identity)
        if indom is None:
            return f"{fmt.LABEL_KINDS[kind]} label for unknown indom serial {identity}"
        if kind == fmt.LABEL_INSTANCES and internal not in indom.positions:
            return f"instance label for unknown instance {internal} of indom {identity}"
        return None


def _label_problem(payload: str) -> str | None:
    """Why PCP would reject this label payload (pmLookupLabels(3)), or None."""

    def no_constants(token: str) -> object:
        raise ValueError(f"{token} is not JSON")

    try:
        obj = json.loads(payload, parse_constant=no_constants)
    except ValueError as e:
        return f"payload is not JSON: {e}"
    if not isinstance(obj, dict) or not obj:
        return "payload is not a non-empty JSON object"
    return _label_names_problem(obj)


def _label_names_problem(obj: dict[str, object]) -> str | None:
    for name, value in obj.items():
        if not LABEL_NAME.fullmatch(name):
            return f"label name {name!r} is not [A-Za-z][A-Za-z0-9_]*"
        if isinstance(value, dict):
            why = _label_names_problem(value)
            if why:
                return why
    return None


LABEL_NAME: Final = re.compile(r"[A-Za-z][A-Za-z0-9_]*")


def merge_labels(labels: Iterable[Label]) -> tuple[str, str]:
    """Merge label payloads in file order (later names override, maps merge) into
    (labels, notes) JSON object texts, split by the on-disk OPTIONAL flag; "" for none.
    Numbers keep the writer's spelling (``-1.5e3`` stays so); text is not re-escaped."""
    required: dict[str, object] = {}
    optional: dict[str, object] = {}
    for lb in labels:
        target = optional if lb.optional else required
        _deep_update(target, json.loads(lb.payload, parse_float=_Raw, parse_int=_Raw))
    return (_dump(required) if required else "", _dump(optional) if optional else "")


def label_set_problem(labels: Iterable[Label]) -> str | None:
    """Why libpcp would reject the label set(s) these labels merge into, or None: as many
    labels as PM_MAXLABELS or more (``__pmAddLabels``: "Argument list too long"), where a
    map's names count and the map itself does not (found with pminfo against PCP 6.0.3:
    254 names pass, flat or in one map; 255 fail).  libpcp's JSON length limit
    (PM_MAXLABELJSONLEN, 65535) cannot be reached first: a name costs at most its 244-byte
    payload, and 254 of them take under 62,000 bytes."""
    for text in merge_labels(labels):
        count = _label_count(json.loads(text)) if text else 0
        if count >= fmt.PM_MAXLABELS:
            return f"they merge into {count} labels, libpcp accepts at most {fmt.PM_MAXLABELS - 1}"
    return None


def _label_count(obj: dict[str, object]) -> int:
    return sum(_label_count(v) if isinstance(v, dict) else 1 for v in obj.values())


def _deep_update(target: dict[str, object], new: dict[str, object]) -> None:
    """Merge ``new`` into ``target`` as PCP merges label sets: maps merge name by name
    (``{"m":{"a":1}}`` then ``{"m":{"b":2}}`` gives ``m.a`` and ``m.b``), anything else
    is replaced."""
    for name, value in new.items():
        old = target.get(name)
        if isinstance(old, dict) and isinstance(value, dict):
            _deep_update(old, value)
        else:
            target[name] = value


class _Raw(str):
    """A JSON number token, kept as written."""


def _dump(value: object) -> str:
    if isinstance(value, _Raw):
        return str(value)
    if isinstance(value, dict):
        items = (f"{json.dumps(k, ensure_ascii=False)}:{_dump(v)}" for k, v in value.items())
        return "{" + ",".join(items) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_dump(v) for v in value) + "]"
    return json.dumps(value, ensure_ascii=False)


class _Ranges(Generic[T]):
    """Disjoint byte ranges ``[start, end)`` with a payload each, sorted by start in blocks
    of at most ``2 * block``: an overlap query costs O(log n) and an insertion O(log n) plus
    moving at most one block, in whatever order the ranges come (a single sorted list
    would move O(n) entries per insertion: 200,000 indoms listed in reverse order took
    16 s).  The standard library has no sorted container, and ``check`` and ``dump`` run on
    the standard library alone."""

    def __init__(self, block: int = 512) -> None:
        self.block = block
        self.blocks: list[list[tuple[int, int, T]]] = []
        self.firsts: list[int] = []  # the first start of each block

    def overlapping(self, start: int, end: int) -> tuple[int, int, T] | None:
        """The range that overlaps ``[start, end)`` (the last one starting before ``end``
        is the only candidate, as the ranges are disjoint), or None."""
        b = bisect.bisect_left(self.firsts, end) - 1
        if b < 0:
            return None
        block = self.blocks[b]
        span = block[bisect.bisect_left(block, end, key=_start) - 1]
        return span if span[1] > start else None

    def add(self, start: int, end: int, payload: T) -> None:
        span = (start, end, payload)
        if not self.blocks:
            self.blocks.append([span])
            self.firsts.append(start)
            return
        b = max(bisect.bisect_right(self.firsts, start) - 1, 0)
        block = self.blocks[b]
        bisect.insort(block, span, key=_start)
        self.firsts[b] = block[0][0]
        half = self.block
        if len(block) > 2 * half:
            self.blocks[b : b + 1] = [block[:half], block[half:]]
            self.firsts[b : b + 1] = [block[0][0], block[half][0]]


def _start(span: tuple[int, int, object]) -> int:
    return span[0]


def printable(text: str) -> str:
    """``text`` safe for one log line, a PCP string or a terminal: undecodable bytes of a
    file name (surrogates) and every character that is not printable (C0 and C1 controls
    such as ESC and U+009B, DEL, newlines, which could forge a log line, and the
    bidirectional overrides and isolates U+202A-U+202E, U+2066-U+2069) are escaped.  The
    one escaping function of the agent, ``check``, ``dump`` and ``debug``."""
    if text.isprintable():
        return text
    out = []
    for ch in text:
        if ch.isprintable():
            out.append(ch)
        elif 0xDC80 <= ord(ch) <= 0xDCFF:  # os.fsdecode's surrogateescape of a byte
            out.append(f"\\x{ord(ch) - 0xDC00:02x}")
        else:
            out.append(ch.encode("unicode_escape").decode("ascii"))
    return "".join(out)
