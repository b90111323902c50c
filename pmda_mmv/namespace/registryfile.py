"""The identity registry's records and its file (:mod:`~.registry`): one JSON document,
versioned, one record a line, read bounded and checked, written atomically (a temporary
file in the same directory, fsync, rename, fsync of the directory)."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Final

VERSION: Final = 1
MAX_CLUSTER: Final = 4095
MAX_SERIAL: Final = (1 << 22) - 1
MAX_BYTES: Final = 64 << 20
"""A registry file larger than this is not read (10,000 names take about 2 MiB)."""
MAX_ITEM: Final = 1023

Key = tuple[str, int]
"""(file name, owner uid)."""


@dataclass(slots=True)
class Record:
    """What the registry keeps for one key."""

    cluster: int
    asked: int
    noprefix: bool = False
    indoms: dict[int, int] = field(default_factory=dict)
    note: str = ""  # why it is not where it asked, as said when it was numbered
    spills: dict[str, tuple[int, int]] = field(default_factory=dict)
    totals: dict[str, dict[int, float]] = field(default_factory=dict)  # a family's departed
    # members' counts, {metric name: {instance id: count}} (docs/families.md)

    def all_clusters(self) -> set[int]:
        """The file's cluster and its spill clusters."""
        return {self.cluster, *(c for c, _ in self.spills.values())}


def read(path: str) -> str:
    """The text of the registry file at ``path``: a regular file (a FIFO would block the
    agent's start for ever, a device never end) of at most MAX_BYTES; OSError otherwise."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, "not a regular file")
        if st.st_size > MAX_BYTES:
            raise OSError(errno.EFBIG, f"larger than {MAX_BYTES >> 20} MiB")
        with os.fdopen(os.dup(fd), "rb") as f:
            data = f.read(MAX_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > MAX_BYTES:
        raise OSError(errno.EFBIG, f"larger than {MAX_BYTES >> 20} MiB")
    return data.decode("utf-8", "surrogateescape")


def _int(value: Any, low: int, high: int) -> int:
    if type(value) is not int or not low <= value <= high:
        raise ValueError(f"{value!r} is not a number from {low} to {high}")
    return value


def parse(text: str, keep: int) -> Iterable[tuple[Key, Record]]:
    """The last ``keep`` records of a registry file's text (the newest: more would be
    forgotten at the first change, after costing seconds to check and index before the
    agent answers pmcd), checked; raises ValueError (and the like)."""
    doc = json.loads(text)
    if not isinstance(doc, dict) or doc.get("version") != VERSION:
        version = doc.get("version") if isinstance(doc, dict) else None
        raise ValueError(f"version {version!r}, this agent reads version {VERSION}")
    names = doc["names"]
    if not isinstance(names, list):
        raise ValueError("names is not a list")
    records = []
    for item in names[-keep:]:
        name = item["name"]
        if not isinstance(name, str) or not name:
            raise ValueError(f"name {name!r}")
        indoms = item.get("indoms", {})
        if not isinstance(indoms, dict):
            raise ValueError(f"{name}: indoms is not an object")
        spills = item.get("spills", {})
        if not isinstance(spills, dict) or not all(
            isinstance(n, str) and isinstance(ci, list) and len(ci) == 2 for n, ci in spills.items()
        ):
            raise ValueError(f"{name}: spills is not an object of [cluster, item]")
        record = Record(
            _int(item["cluster"], 1, MAX_CLUSTER),
            _int(item.get("asked", 0), 0, MAX_CLUSTER),
            bool(item.get("noprefix", False)),
            {_int(int(s), 0, MAX_SERIAL): _int(p, 1, MAX_SERIAL) for s, p in indoms.items()},
            str(item.get("note", "")),
            {n: (_int(c, 1, MAX_CLUSTER), _int(i, 0, MAX_ITEM)) for n, (c, i) in spills.items()},
        )
        record.totals = _totals(name, item.get("totals", {}))
        records.append(((name, _int(item["uid"], 0, (1 << 32) - 1)), record))
    return records


def _totals_doc(totals: dict[str, dict[int, float]]) -> dict[str, dict[str, float]]:
    return {m: {str(i): v for i, v in sorted(t.items())} for m, t in totals.items()}


def _totals(name: str, doc: Any) -> dict[str, dict[int, float]]:
    """A family's departed counts as read: ``{metric: {instance id: number}}``."""
    if not isinstance(doc, dict) or not all(isinstance(t, dict) for t in doc.values()):
        raise ValueError(f"{name}: totals is not an object of objects")
    out: dict[str, dict[int, float]] = {}
    for metric, t in doc.items():
        row = out[str(metric)] = {}
        for inst, value in t.items():
            if type(value) not in (int, float):
                raise ValueError(f"{name}: totals of {metric}: {value!r} is not a number")
            row[_int(int(inst), -(1 << 31), (1 << 32) - 1)] = value
    return out


def record_line(key: Key, r: Record, present: bool) -> str:
    """The line of the registry file that holds ``key``'s record ``r``."""
    doc: dict[str, Any] = {
        "name": key[0],
        "uid": key[1],
        "cluster": r.cluster,
        "asked": r.asked,
        "noprefix": r.noprefix,
        "indoms": {str(s): p for s, p in sorted(r.indoms.items())},
        **({"spills": {n: list(ci) for n, ci in r.spills.items()}} if r.spills else {}),
        **({"totals": _totals_doc(r.totals)} if r.totals else {}),
        "present": present,
    }
    if r.note:
        doc["note"] = r.note
    return json.dumps(doc)


def write_atomically(path: str, data: bytes, renamed: Callable[[], None] | None = None) -> None:
    """Replace the file at ``path`` by ``data`` atomically; OSError when that failed (the
    temporary file removed). ``renamed`` runs once the file is in place, before the
    directory is synced (the registry writes its secret there)."""
    directory = os.path.dirname(path) or "."
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        try:  # never through a name planted before (a symlink to a file pcp may write)
            fd = os.open(tmp, flags, 0o644)
        except FileExistsError:  # left by an agent of this PID killed mid-save, or planted
            os.unlink(tmp)
            fd = os.open(tmp, flags, 0o644)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(tmp, path)
        if renamed is not None:
            renamed()
        dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
