"""The fuzz oracle: what must hold for *any* bytes handed to the reader and catalogue.

Shared by the atheris target (``fuzz/fuzz_reader.py``) and the bounded hypothesis run in CI
(``tests/unit/mmvfile/test_fuzz_inputs.py``).  :func:`check_bytes` writes the bytes to a
file and runs :func:`check_file`, which raises :class:`Finding` (or lets any other exception
escape) when the reader or the catalogue misbehaves.  Only
:class:`~pmda_mmv.mmvfile.reader.MmvError` subclasses may come out of the reader; everything
the agent would hand to python3-pcp must be something pmcd accepts.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from typing import Final

from pmda_mmv.mmvfile import layout, limits
from pmda_mmv.mmvfile.decode import NO_VALUE, UNSUPPORTED
from pmda_mmv.mmvfile.errors import Changed, MmvError
from pmda_mmv.mmvfile.reader import MmvFile
from pmda_mmv.mmvfile.rules import name_problem
from pmda_mmv.namespace.catalogue import Catalogue
from pmda_mmv.namespace.served import FileEntry

PCP_INT_RANGE: Final = {
    layout.TYPE_I32: (-(1 << 31), (1 << 31) - 1),
    layout.TYPE_U32: (0, (1 << 32) - 1),
    layout.TYPE_I64: (-(1 << 63), (1 << 63) - 1),
    layout.TYPE_U64: (0, (1 << 64) - 1),
    layout.TYPE_ELAPSED: (-(1 << 63), (1 << 63) - 1),  # served as PM_TYPE_64
}
"""Range of each integer type as python3-pcp converts it (PyArg_Parse i, I, L, K)."""


_SHM = "/dev/shm" if os.path.isdir("/dev/shm") else None


class Finding(AssertionError):
    """The reader or catalogue broke a rule of the oracle."""


def check_bytes(data: bytes, path: str) -> str:
    """Write ``data`` to ``path`` and check it (see :func:`check_file`)."""
    with open(path, "wb") as f:
        f.write(data)
    return check_file(path, truncate_to=len(data) // 2)


def check_file(path: str, truncate_to: int | None = None) -> str:
    """Open, read and catalogue ``path``; then, with ``truncate_to``, truncate it in place
    and read again.  Returns the outcome (an MmvError kind, ``ok`` or ``partial``)."""
    try:
        mf = MmvFile.open(path)
    except MmvError as e:
        _check_error(e, os.path.getsize(path))
        return e.kind
    with mf:
        for problem in mf.problems:
            _check_error(problem, mf.size)
        _check_values(mf)
        _check_catalogue(mf)
        if truncate_to is not None:
            os.truncate(path, truncate_to)
            try:
                _check_values(mf)
                mf.check_generation()
            except Changed as e:
                str(e)
        return mf.status


def _check_error(e: MmvError, size: int) -> None:
    if not e.field or not e.message:
        raise Finding(f"error without field or message: {e!r}")
    if not (e.offset == -1 or 0 <= e.offset < max(size, layout.HEADER_SIZE)):
        raise Finding(f"offset {e.offset} outside a file of {size} bytes: {e}")
    str(e)
    json.dumps(e.as_dict())


def _check_values(mf: MmvFile) -> None:
    try:
        snap = mf.snapshot()
    except Changed:
        return
    for metric, _inst, value in mf.values(snap):
        if value is NO_VALUE or value is UNSUPPORTED:
            continue
        bounds = PCP_INT_RANGE.get(metric.type)
        if bounds is not None:
            if not isinstance(value, int) or not bounds[0] <= value <= bounds[1]:
                raise Finding(f"{metric.name}: {value!r} is not a PCP type {metric.type} value")
        elif metric.type in (layout.TYPE_FLOAT, layout.TYPE_DOUBLE):
            if not isinstance(value, float):
                raise Finding(f"{metric.name}: {value!r} is not a float")
        elif metric.type == layout.TYPE_STRING:
            if not isinstance(value, str) or "\0" in value:
                raise Finding(f"{metric.name}: {value!r} is not a C string")
        else:
            raise Finding(f"{metric.name}: type {metric.type} produced {value!r}")


def _check_catalogue(mf: MmvFile) -> None:
    """Serve the file alone, then twice (under two names) beside a valid companion file:
    clusters, PMIDs, names and PCP indom serials must never be shared, and removing every
    file must leave the catalogue empty."""
    lines: list[str] = []
    cat = Catalogue(log=lines.append)
    entry = cat.add(mf, set())
    if entry is None:
        if not lines:
            raise Finding("file not served and nothing logged")
        return
    _check_entry(entry)
    cat.remove(mf.name)
    _check_empty(cat)
    with MmvFile.open(mf.path, name="twin") as twin, MmvFile.open(_companion()) as other:
        entries = [cat.add(f, {other.header.cluster}) for f in (other, mf, twin)]
        _check_distinct([e for e in entries if e is not None])
        for f in (mf, other, twin):
            cat.remove(f.name)
    _check_empty(cat)


def _check_empty(cat: Catalogue) -> None:
    if (
        cat.files
        or cat.leaves
        or cat.tree
        or cat.clusters.held_by
        or cat.sources
        or cat.indom_sources
        or cat.indom_keys
    ):
        raise Finding("catalogue not empty after every file was removed")


def _check_distinct(entries: list[FileEntry]) -> None:
    """Files may share a cluster only as PCP QA 648's writers do: one name and one descriptor
    per PMID, one PMID per name, and an indom shared only by files sharing its cluster."""
    by_pmid: dict[tuple[int, int], set[tuple[object, ...]]] = {}
    by_name: dict[str, set[tuple[int, int]]] = {}
    by_indom: dict[int, set[tuple[int, int]]] = {}
    for e in entries:
        for m in e.metrics:
            by_pmid.setdefault((m.cluster, m.item), set()).add(
                (m.name, m.type, m.semantics, m.units, m.indom.serial if m.indom else None)
            )
            by_name.setdefault(m.name, set()).add((m.cluster, m.item))
        for serial, si in e.indoms.items():
            by_indom.setdefault(si.serial, set()).add((e.cluster, serial))
    for what, table in (("PMID", by_pmid), ("name", by_name), ("indom", by_indom)):
        for key, seen in table.items():
            if len(seen) != 1:
                raise Finding(f"{what} {key} served as {sorted(map(str, seen))}")
    for e in entries:
        _check_entry(e)


_COMPANION: list[str] = []


def _companion() -> str:
    """A valid file (the byte builder's version 3 sample) beside the fuzzed one."""
    if not _COMPANION:
        from tests.support.mmvbuild import sample

        fd, path = tempfile.mkstemp(prefix="companion-", dir=_SHM)
        os.write(fd, bytes(sample(3).build().data))
        os.close(fd)
        _COMPANION.append(path)
    return _COMPANION[0]


def _check_entry(entry: FileEntry) -> None:
    if not 1 <= entry.cluster <= limits.MAX_CLUSTER:
        raise Finding(f"cluster {entry.cluster}")
    for si in entry.indoms.values():
        if not 0 < si.serial < 1 << 22:
            raise Finding(f"PCP indom serial {si.serial}")
        for pair in si.instance_labels.values():
            _check_labels(*pair)
        _check_labels(si.labels, si.notes)
    names = set()
    for sm in entry.metrics:
        if name_problem(sm.name) or sm.name in names or not 0 <= sm.item <= limits.MAX_ITEM:
            raise Finding(f"served metric {sm.name!r} item {sm.item}")
        names.add(sm.name)
        _check_labels(sm.labels, sm.notes)
        for text in (sm.oneline, sm.helptext):  # None: the file has no help text
            if text is not None and "\0" in text:
                raise Finding(f"{sm.name}: help text with NUL")
    _check_labels(entry.labels, entry.notes)


def _reject_constant(name: str) -> object:
    raise ValueError(f"{name} is not JSON")


LABEL_NAME: Final = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,254}")
"""A label name pmcd accepts (pmLookupLabels(3); pmLabel namelen is 8 bits)."""


def _check_labels(*texts: str) -> None:
    """Served label sets must be strict JSON objects (pmcd's parser rejects NaN etc.) whose
    names are label names."""
    for text in texts:
        if not text:
            continue
        try:
            obj = json.loads(text, parse_constant=_reject_constant)
        except ValueError as e:
            raise Finding(f"served label set {text!r} is not strict JSON: {e}") from None
        if not isinstance(obj, dict):
            raise Finding(f"served label set {text!r} is not an object")
        for name in obj:
            if not LABEL_NAME.fullmatch(name):
                raise Finding(f"served label name {name!r} is not a PCP label name")
