"""The benchmark's MMV files, written by libpcp_mmv (its registry API, through the tree's
one binding, tests/support/writers/libpcp_mmv.py).

A :class:`Shape` is ``metrics`` x ``instances`` values over one indom, as the C floor agent
(``pmdafloor.c``) serves them: metric ``mNNN`` is item NNN, U64 counter when NNN is even,
DOUBLE instant when odd; instances are ``iNNNNN`` with internal ids 0..n-1.  After
``mmv_stats_start`` returns (the writer has completed the file: g1 == g2) the values are set
through the writer's own mapping, as a live application would, so that every value is a
distinct non-zero number: U64 ``expected_u64(j, i)``, DOUBLE ``expected_double(j, i)``.
"""

from __future__ import annotations

import ctypes
import time
from array import array
from dataclasses import dataclass
from pathlib import Path

from pmda_mmv.mmvfile import layout
from tests.support.writers.libpcp_mmv import Mapping, Registry, library


@dataclass(frozen=True)
class Shape:
    """``name`` (file name, and the PMNS component after the prefix), ``metrics`` and
    ``instances`` per metric; ``cluster`` is the header cluster (explicit, so PMIDs are
    stable and both agents agree); metric j is item ``item_base + j`` (files sharing a
    cluster use distinct items)."""

    name: str
    metrics: int
    instances: int
    cluster: int
    item_base: int = 0

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
    return layout.TYPE_U64 if j % 2 == 0 else layout.TYPE_DOUBLE


def expected_u64(j: int, i: int) -> int:
    return (j + 1) * 1_000_003 + i


def expected_double(j: int, i: int) -> float:
    return (j + 1) + i / 4.0


class Writer:
    """libpcp_mmv (:mod:`tests.support.writers.libpcp_mmv`), loaded once.  :meth:`write` creates one
    complete file and returns the time (``time.perf_counter``) at which the writer finished
    it."""

    def __init__(self) -> None:
        self.lib = library()

    def write(self, path: Path, shape: Shape, fill: bool = True) -> float:
        """Write ``path`` (an absolute path: libpcp_mmv puts relative names under
        $PCP_TMP_DIR/mmv) with ``shape``; ``fill`` sets every value (see the module
        docstring).  The registry is freed afterwards: the file stays, complete."""
        if not path.is_absolute():
            raise ValueError(f"{path}: libpcp_mmv needs an absolute path here")
        r = Registry(path, shape.cluster, lib=self.lib)
        try:
            r.indom(1, ((i, f"i{i:05d}") for i in range(shape.instances)), "benchmark instances")
            for j in range(shape.metrics):
                sem = layout.SEM_COUNTER if j % 2 == 0 else layout.SEM_INSTANT
                r.metric(f"m{j:03d}", shape.item_base + j, metric_type(j), sem, 0, 1)
            r.start()
            done = time.perf_counter()
            if fill:
                _fill(r.started, shape)
            return done
        finally:
            r.free()


def _fill(mapping: Mapping, shape: Shape) -> None:
    """Set every value through the writer's mapping.  libpcp_mmv lays the VALUES section
    out metric by metric, instance by instance (mmv_stats.c mmv_init)."""
    values_at, count = mapping.values_section()
    if count != shape.values:
        raise RuntimeError(f"libpcp_mmv wrote {count} values, expected {shape.values}")
    words = shape.values * layout.VALUE_SIZE // 8
    section = (ctypes.c_uint64 * words).from_address(values_at)
    view = memoryview(section).cast("B").cast("Q")
    step = layout.VALUE_SIZE // 8
    n = shape.instances
    for j in range(shape.metrics):
        if metric_type(j) == layout.TYPE_U64:
            column = array("Q", (expected_u64(j, i) for i in range(n)))
        else:
            doubles = array("d", (expected_double(j, i) for i in range(n)))
            column = array("Q", memoryview(doubles).cast("B").cast("Q"))
        start = j * n * step
        view[start : start + n * step : step] = column
