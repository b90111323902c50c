"""The identity registry's records and its file (:mod:`~.registry`): one JSON document,
versioned, one record a line, read bounded and checked, written atomically (a temporary
file in the same directory, fsync, rename, fsync of the directory); its journal is
:mod:`~.registryjournal`.

Keys: a file's is ``(file name, owner uid)`` (a container's file name is
``containers/NAME/FILE``, which no host file name can be: a host name has no ``/``); a
family's is ``(family name, owner uid, "family")``, a key of another length, which no file
name can be.  In the file a family's record has ``"kind": "family"``.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import math
import os
import re
import stat
from dataclasses import dataclass, field
from typing import Any, Final

from pmda_mmv.namespace.registrykept import Kept, kept_doc, parse_kept

VERSION: Final = 2
OLD_VERSION: Final = 1
"""Read and converted (:func:`_old_key`); written as VERSION at the next save."""
MAX_CLUSTER: Final = 4095
MAX_SERIAL: Final = (1 << 22) - 1
MAX_BYTES: Final = 64 << 20
"""Read of a registry file (and of its journal): a larger one is read from its end, the
newest records (saves stay far below: the registry's bytes are bounded, :mod:`~.registry`)."""
MAX_ITEM: Final = 1023

Key = tuple[str, int] | tuple[str, int, str]
"""(file name, owner uid) of a file; (family name, owner uid, FAMILY) of a family."""
FAMILY: Final = "family"
OLD_FAMILY: Final = "family:"
"""How a version 1 file named a family's record: ``family:NAME`` (:func:`_old_key`)."""
SPILL_NAME_BYTES: Final = 64
"""A spilled metric name longer than this is kept as its digest (:func:`spill_key`)."""


def spill_key(name: str) -> str:
    """How the registry keeps spilled metric ``name``: itself, or past SPILL_NAME_BYTES a
    fixed-size digest (``#`` and 32 hex digits: no metric name has a ``#``), so that a
    long name costs the registry a bounded amount."""
    data = name.encode("utf-8", "surrogateescape")
    if len(data) <= SPILL_NAME_BYTES:
        return name
    return "#" + hashlib.blake2b(data, digest_size=16).hexdigest()


Totals = dict[str, dict[int, float]]
"""A family's departed members' counts: {metric name: {instance id: count}}."""
Ledger = list[tuple[str, int, int]]
"""The family's departed members (file name, generation) whose counts are in its totals."""


@dataclass(slots=True)
class Record:
    """What the registry keeps for one key."""

    cluster: int
    asked: int
    noprefix: bool = False
    indoms: dict[int, int] = field(default_factory=dict)
    note: str = ""  # why it is not where it asked, as said when it was numbered
    spills: dict[str, tuple[int, int]] = field(default_factory=dict)
    totals: Totals = field(default_factory=dict)  # a family's (docs/families.md)
    credited: Ledger = field(default_factory=list)
    kept: Kept = field(default_factory=Kept)  # a family's descriptors (registrykept.py)
    body: str = field(default="", compare=False, repr=False)  # its record_body, as read

    def all_clusters(self) -> set[int]:
        """The file's cluster and its spill clusters."""
        return {self.cluster, *(c for c, _ in self.spills.values())}


def describe(key: Key) -> str:
    """A key as a log line shows it: the name, and the owner when it is not root's."""
    name = f"family {key[0]}" if len(key) > 2 else key[0]
    return name if key[1] in (0, -1) else f"{name} (uid {key[1]})"


Holders = tuple[Key, ...] | dict[Key, None]
"""The keys holding one number, first holder first: a tuple while few (48 bytes, a dict's
184), an insertion-ordered dict past :data:`FEW_HOLDERS`, so that the thousands of files of
one application sharing a cluster (PCP QA 648) cost one step each, not one per holder."""

FEW_HOLDERS: Final = 8
"""The most holders of one number kept as a tuple."""


def add_holder(table: dict[int, Holders], number: int, key: Key) -> None:
    """``key`` holds ``number`` (after those holding it already)."""
    held = table.get(number)
    if held is None:
        table[number] = (key,)
    elif isinstance(held, dict):
        held.setdefault(key)
    elif key not in held:
        grown = (*held, key)
        table[number] = grown if len(grown) <= FEW_HOLDERS else dict.fromkeys(grown)


def drop_holder(table: dict[int, Holders], number: int, key: Key) -> bool:
    """``key`` no longer holds ``number``; True when no key does."""
    held = table.get(number)
    if held is None or key not in held:
        return False
    if isinstance(held, dict):
        del held[key]
    else:
        held = tuple(k for k in held if k != key)
    if not held:
        del table[number]
        return True
    table[number] = held
    return False


def read(path: str, limit: int = MAX_BYTES, tail: int = MAX_BYTES // 4) -> tuple[str, bool]:
    """The text of the registry file at ``path``: a regular file (a FIFO would block the
    agent's start for ever, a device never end), OSError otherwise; and whether it is
    larger than ``limit``, when the text is its first line and its last ``tail`` bytes
    (:func:`parse_tail` reads what it can of them)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, "not a regular file")
        with os.fdopen(os.dup(fd), "rb") as f:
            data = f.read(4096 if st.st_size > limit else limit + 1)
            big = len(data) > limit or st.st_size > limit
            if big:
                head = data[: data.find(b"\n") + 1 or 4096]
                f.seek(max(-tail, -st.st_size), os.SEEK_END)
                data = head + f.read(tail)
    finally:
        os.close(fd)
    return data.decode("utf-8", "surrogateescape"), big


def parse_tail(text: str, keep: int) -> list[tuple[Key, Record]]:
    """The records of the last ``keep`` whole, usable lines of a file too large to read
    whole (:func:`read`; newest first read, so that no more are checked than are kept):
    a file of one record a line, as this agent writes, loads what it can; ValueError when
    its first line is not a registry's."""
    head, _, rest = text.partition("\n")
    found = re.match(r'\{"version": (\d+)', head)
    if not found or int(found.group(1)) not in (VERSION, OLD_VERSION):
        raise ValueError("not a registry")
    records: list[tuple[Key, Record]] = []
    for line in reversed(rest.split("\n")[1:]):  # the first is cut
        if len(records) >= keep:
            break
        with contextlib.suppress(ValueError, TypeError, KeyError, AttributeError, RecursionError):
            records.append(parse_record(json.loads(line.rstrip(",")), int(found.group(1))))
    return records[::-1]


def _int(value: Any, low: int, high: int) -> int:
    if type(value) is not int or not low <= value <= high:
        raise ValueError(f"{value!r} is not a number from {low} to {high}")
    return value


def parse(text: str, keep: int) -> tuple[list[tuple[Key, Record]], str]:
    """The last ``keep`` records of a registry file's text (the newest: more would be
    forgotten at the first change, after costing seconds to check and index before the
    agent answers pmcd), checked, and the file's epoch (its journal's, "" for a version 1
    file); raises ValueError (and the like)."""
    doc = json.loads(text)
    version = doc.get("version") if isinstance(doc, dict) else None
    if version not in (VERSION, OLD_VERSION):
        raise ValueError(f"version {version!r}, this agent reads version {VERSION}")
    names = doc["names"]
    if not isinstance(names, list):
        raise ValueError("names is not a list")
    epoch = doc.get("epoch", "") if version == VERSION else ""
    records = [parse_record(item, version) for item in names[-keep:]]
    lines = text.split("\n")
    if version == VERSION and len(lines) == len(names) + 3:  # one record a line, as written
        for (_, record), line in zip(records, lines[-2 - len(records) : -2], strict=True):
            record.body = read_body(line.rstrip(","))
    return records, str(epoch)


def read_body(line: str) -> str:
    """The :func:`record_body` of a record's line as :func:`record_line` wrote it ("" when
    it is not one: the record is encoded anew)."""
    for end in (', "present": true}', ', "present": false}'):
        if line.endswith(end):
            return line[: -len(end)] + "}"
    return ""


def parse_record(item: Any, version: int = VERSION) -> tuple[Key, Record]:
    """One record of the file (a line's object), checked; raises ValueError (and the like)."""
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
        {
            spill_key(n): (_int(c, 1, MAX_CLUSTER), _int(i, 0, MAX_ITEM))
            for n, (c, i) in spills.items()
        },
    )
    record.totals = _totals(name, item.get("totals", {}))
    record.credited = _credited(name, item.get("credited", []))
    record.kept = parse_kept(name, item.get("descriptors"))
    return parse_key(item, version, record.noprefix), record


def parse_key(item: Any, version: int = VERSION, noprefix: bool = False) -> Key:
    """The key of a record (or of a journal's forget line)."""
    name, kind = item["name"], item.get("kind")
    if not isinstance(name, str) or not name:
        raise ValueError(f"name {name!r}")
    if kind == FAMILY:
        return (name, _int(item["uid"], -1, (1 << 32) - 1), FAMILY)
    if kind is not None:
        raise ValueError(f"{name}: kind {kind!r}")
    uid = _int(item["uid"], 0 if version == VERSION else -1, (1 << 32) - 1)
    if version == OLD_VERSION:
        return _old_key(name, uid, noprefix)
    return (name, uid)


def _old_key(name: str, uid: int, noprefix: bool) -> Key:
    """A version 1 record's key: ``family:NAME`` not NOPREFIX is family NAME's (a file of
    that name is served only as NOPREFIX: a prefixed one's metric names would have a colon),
    any other a file's (a NOPREFIX file named ``family:NAME`` stays a file's)."""
    if name.startswith(OLD_FAMILY) and not noprefix and len(name) > len(OLD_FAMILY):
        return (name[len(OLD_FAMILY) :], uid, FAMILY)
    if uid < 0:
        raise ValueError(f"{name}: uid {uid}")
    return (name, uid)


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
            if math.isfinite(value):  # an older agent's Infinity or NaN: not a count
                row[_int(int(inst), -(1 << 31), (1 << 32) - 1)] = value
    return out


def _credited(name: str, doc: Any) -> list[tuple[str, int, int]]:
    """A family's ledger as read: ``[[file name, g1, g2], ...]``."""
    if not isinstance(doc, list) or not all(
        isinstance(e, list) and len(e) == 3 and isinstance(e[0], str) for e in doc
    ):
        raise ValueError(f"{name}: credited is not a list of [name, g1, g2]")
    return [(e[0], _int(e[1], 0, (1 << 64) - 1), _int(e[2], 0, (1 << 64) - 1)) for e in doc]


def record_body(key: Key, r: Record) -> str:
    """The line of the registry file that holds ``key``'s record ``r``, without whether it
    is present (:func:`record_line` adds it): the registry keeps it until ``r`` changes."""
    doc: dict[str, Any] = {
        "name": key[0],
        "uid": key[1],
        **({"kind": key[2]} if len(key) > 2 else {}),
        "cluster": r.cluster,
        "asked": r.asked,
        "noprefix": r.noprefix,
        "indoms": {str(s): p for s, p in sorted(r.indoms.items())},
        **({"spills": {n: list(ci) for n, ci in r.spills.items()}} if r.spills else {}),
        **({"totals": _totals_doc(r.totals)} if r.totals else {}),
        **({"credited": [list(e) for e in r.credited]} if r.credited else {}),
        **({"descriptors": kept_doc(r.kept)} if r.kept else {}),
    }
    if r.note:
        doc["note"] = r.note
    return json.dumps(doc, allow_nan=False)


def record_line(body: str, present: bool) -> str:
    """A record's line of the registry file: its :func:`record_body` and ``present``."""
    return f'{body[:-1]}, "present": {"true" if present else "false"}}}'


def key_line(key: Key) -> str:
    """A journal's line saying ``key`` is forgotten."""
    kind = {"kind": key[2]} if len(key) > 2 else {}
    return json.dumps({"forget": True, "name": key[0], "uid": key[1], **kind})
