"""The benchmark's MMV files, written by libpcp_mmv (its registry API, through ctypes).

A :class:`Shape` is ``metrics`` x ``instances`` values over one indom, as the C floor agent
(``pmdafloor.c``) serves them: metric ``mNNN`` is item NNN, U64 counter when NNN is even,
DOUBLE instant when odd; instances are ``iNNNNN`` with internal ids 0..n-1.  After
``mmv_stats_start`` returns (the writer has completed the file: g1 == g2) the values are set
through the writer's own mapping, as a live application would, so that every value is a
distinct non-zero number: U64 ``expected_u64(j, i)``, DOUBLE ``expected_double(j, i)``.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import time
from array import array
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pmda_mmv import format as fmt


@dataclass(frozen=True)
class Shape:
    """``name`` (file name, and the PMNS component after the prefix), ``metrics`` and
    ``instances`` per metric; ``cluster`` is the header cluster (explicit, so PMIDs are
    stable and both agents agree)."""

    name: str
    metrics: int
    instances: int
    cluster: int

    @property
    def values(self) -> int:
        return self.metrics * self.instances

    def metric_names(self, prefix: str) -> list[str]:
        return [f"{prefix}.{self.name}.m{j:03d}" for j in range(self.metrics)]

    @property
    def floor_arg(self) -> str:
        """The shape as ``pmdafloor`` takes it: NAME:METRICS:INSTANCES."""
        return f"{self.name}:{self.metrics}:{self.instances}"


def metric_type(j: int) -> int:
    return fmt.TYPE_U64 if j % 2 == 0 else fmt.TYPE_DOUBLE


def expected_u64(j: int, i: int) -> int:
    return (j + 1) * 1_000_003 + i


def expected_double(j: int, i: int) -> float:
    return (j + 1) + i / 4.0


class _Units(ctypes.Structure):
    _fields_ = [("word", ctypes.c_uint32)]


def _library() -> ctypes.CDLL:
    lib = ctypes.CDLL(ctypes.util.find_library("pcp_mmv") or "libpcp_mmv.so.1", use_errno=True)
    vp, cp, ci = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int
    signatures: dict[str, tuple[Any, list[Any]]] = {
        "mmv_stats_registry": (vp, [cp, ci, ci]),
        "mmv_stats_add_indom": (ci, [vp, ci, cp, cp]),
        "mmv_stats_add_instance": (ci, [vp, ci, ci, cp]),
        "mmv_stats_add_metric": (ci, [vp, cp, ci, ci, ci, _Units, ci, cp, cp]),
        "mmv_stats_start": (vp, [vp]),
        "mmv_stats_free": (None, [vp]),
    }
    for name, (res, args) in signatures.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = res, args
    return lib


class Writer:
    """libpcp_mmv, loaded once.  :meth:`write` creates one complete file and returns the
    time (``time.perf_counter``) at which the writer finished it."""

    def __init__(self) -> None:
        self.lib = _library()

    def write(self, path: Path, shape: Shape, fill: bool = True) -> float:
        """Write ``path`` (an absolute path: libpcp_mmv puts relative names under
        $PCP_TMP_DIR/mmv) with ``shape``; ``fill`` sets every value (see the module
        docstring).  The registry is freed afterwards: the file stays, complete."""
        if not path.is_absolute():
            raise ValueError(f"{path}: libpcp_mmv needs an absolute path here")
        keep = [str(path).encode()]  # the registry keeps these pointers until it is freed

        def text(s: str) -> bytes:
            keep.append(s.encode())
            return keep[-1]

        lib = self.lib
        reg = lib.mmv_stats_registry(keep[0], shape.cluster, 0)
        if not reg:
            raise OSError(ctypes.get_errno(), f"mmv_stats_registry {path}")
        try:
            lib.mmv_stats_add_indom(reg, 1, text("benchmark instances"), None)
            for i in range(shape.instances):
                lib.mmv_stats_add_instance(reg, 1, i, text(f"i{i:05d}"))
            for j in range(shape.metrics):
                sem = fmt.SEM_COUNTER if j % 2 == 0 else fmt.SEM_INSTANT
                rc = lib.mmv_stats_add_metric(
                    reg, text(f"m{j:03d}"), j, metric_type(j), sem, _Units(0), 1, None, None
                )
                if rc < 0:
                    raise OSError(ctypes.get_errno(), f"mmv_stats_add_metric m{j:03d} {path}")
            addr = lib.mmv_stats_start(reg)
            if not addr:
                raise OSError(ctypes.get_errno(), f"mmv_stats_start {path}")
            done = time.perf_counter()
            if fill:
                _fill(addr, shape)
            return done
        finally:
            lib.mmv_stats_free(reg)


def _fill(addr: int, shape: Shape) -> None:
    """Set every value through the writer's mapping at ``addr``.  libpcp_mmv lays the
    VALUES section out metric by metric, instance by instance (mmv_stats.c mmv_init)."""
    head = ctypes.string_at(addr, fmt.HEADER_SIZE)
    tocs = fmt.HEADER.unpack(head)[4]
    values_at = -1
    for k in range(tocs):
        raw = ctypes.string_at(addr + fmt.HEADER_SIZE + k * fmt.TOC_SIZE, fmt.TOC_SIZE)
        ttype, count, offset = fmt.TOC.unpack(raw)
        if ttype == fmt.TOC_VALUES:
            if count != shape.values:
                raise RuntimeError(f"libpcp_mmv wrote {count} values, expected {shape.values}")
            values_at = offset
    if values_at < 0:
        raise RuntimeError("libpcp_mmv wrote no VALUES section")
    words = shape.values * fmt.VALUE_SIZE // 8
    section = (ctypes.c_uint64 * words).from_address(addr + values_at)
    view = memoryview(section).cast("B").cast("Q")
    step = fmt.VALUE_SIZE // 8
    n = shape.instances
    for j in range(shape.metrics):
        if metric_type(j) == fmt.TYPE_U64:
            column = array("Q", (expected_u64(j, i) for i in range(n)))
        else:
            doubles = array("d", (expected_double(j, i) for i in range(n)))
            column = array("Q", memoryview(doubles).cast("B").cast("Q"))
        start = j * n * step
        view[start : start + n * step : step] = column
