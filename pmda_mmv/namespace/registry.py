"""The identity registry: every number the agent gave a file, kept across restarts, without PCP.

A file's identity is its name and its owner (uid): :data:`Key`.  For each key the registry
keeps the cluster the file was served under, the header cluster it asked for, whether it is
a NOPREFIX file, the PCP indom serial of each of its indoms (``{file serial: PCP
serial}``), and the PMID of each metric it ever had served under a spill cluster
(``{metric name: (cluster, item)}``, oldest first; docs/spill.md).  Keys are kept in
last-seen order (a key moves to the end when it is served and when it departs); served keys
are *present*, the others *departed*.

Rules (the catalogue applies them, :mod:`~.catalogue`; docs/identity.md):

* A number held by a key (present or departed) is never given to another key while
  never-held numbers remain; a returning key gets its own numbers back.
* Beyond ``cap`` remembered keys the longest-departed are forgotten (their numbers free
  again); when every cluster is served or held, the longest-departed holder of a cluster
  that is not served is evicted (:meth:`Registry.evict_cluster`), the documented last resort.
  Both take first the names of the owner who holds the most (:meth:`_forgettable`): one
  user cycling names cannot push another user's numbers out.
* Persistence: one JSON file (versioned, one record a line), written atomically (temporary
  file in the same directory, fsync, rename, fsync of the directory) by :meth:`save`, which
  the agent calls before it serves a new number.  A missing file is an empty registry; an
  unreadable, truncated, hand-edited or wrong-version file is logged once and rebuilt; a
  save that fails is logged once (per cause) and the agent goes on serving from memory.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import json
import os
import stat
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Final

from pmda_mmv.namespace.secret import read_secret, write_secret

VERSION: Final = 1
CAP: Final = 10_000
"""Remembered keys (present and departed) before the longest-departed are forgotten."""
MAX_CLUSTER: Final = 4095
MAX_SERIAL: Final = (1 << 22) - 1
MAX_BYTES: Final = 64 << 20
"""A registry file larger than this is not read (10,000 names take about 2 MiB)."""
MAX_ITEM: Final = 1023
SUFFIX: Final = ".mmv-identity.json"
NONE: Final = ("", "none")
"""``--registry`` values for a registry in memory only."""

Key = tuple[str, int]
"""(file name, owner uid)."""
Log = Callable[[str], None]


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


def default_path(var_dir: str, domain: int) -> str:
    """``$PCP_VAR_DIR/config/pmda/<domain>.mmv-identity.json``."""
    return os.path.join(var_dir, "config", "pmda", f"{domain}{SUFFIX}")


def describe(key: Key) -> str:
    """A key as a log line shows it: the name, and the owner when it is not root's."""
    name, uid = key
    return name if uid == 0 else f"{name} (uid {uid})"


class Registry:
    """The numbers of every remembered key; see the module docstring.  ``path`` None: in
    memory only.  ``readonly``: loaded but never saved (``check``)."""

    def __init__(
        self,
        path: str | None = None,
        cap: int = CAP,
        log: Log | None = None,
        readonly: bool = False,
    ) -> None:
        self.path = path
        self.cap = max(cap, 1)
        self.log: Log = log or (lambda line: None)
        self.readonly = readonly
        self.records: dict[Key, Record] = {}  # last-seen order, oldest first
        self.present: set[Key] = set()
        self.departed: dict[Key, None] = {}  # the keys not present, longest departed first
        # cluster -> keys holding it; PCP indom serial -> keys holding it (tuples: most
        # numbers have one holder, and a set cost 216 bytes a number, a tuple 48)
        self.clusters: dict[int, tuple[Key, ...]] = {}
        self.serials: dict[int, tuple[Key, ...]] = {}
        self.dirty = False
        self.evictions: list[str] = []  # the last evictions, as logged (newest last)
        self.evicted = 0  # keys forgotten so far (cap and pool exhausted)
        self.problem = ""  # the last load or save problem ("" when none)
        self.saves = 0
        self.released = 0  # clusters no key holds any more (the catalogue's search restarts)
        self._lines: dict[Key, str] = {}  # each record's JSON line, until it changes
        self._capped = False  # the cap was reached (logged once)
        self.secret, self._secret_saved = read_secret(None)  # random: saved with the registry

    # -- queries

    def get(self, key: Key) -> Record | None:
        return self.records.get(key)

    def holders(self, cluster: int, key: Key | None = None) -> list[Key]:
        """The keys other than ``key`` holding ``cluster``, longest-seen first."""
        held = self.clusters.get(cluster)
        if not held:
            return []
        return (
            [k for k in self.records if k in held and k != key]
            if len(held) > 1
            else [k for k in held if k != key]
        )

    def cluster_held(self, cluster: int, key: Key | None = None) -> bool:
        """Whether a key other than ``key`` holds ``cluster``."""
        held = self.clusters.get(cluster)
        return held is not None and (key is None or len(held) > 1 or key not in held)

    def serial_held(self, serial: int, key: Key | None = None) -> bool:
        """Whether a key other than ``key`` holds PCP indom serial ``serial``."""
        held = self.serials.get(serial)
        return held is not None and (key is None or len(held) > 1 or key not in held)

    def serial_holders(self, serial: int, key: Key | None = None) -> list[Key]:
        return sorted(k for k in self.serials.get(serial, ()) if k != key)

    # -- changes

    def serve(
        self,
        key: Key,
        cluster: int,
        asked: int,
        noprefix: bool,
        indoms: dict[int, int],
        note: str = "",
        spills: dict[str, tuple[int, int]] | None = None,
    ) -> None:
        """``key`` is served with these numbers (now present, newest); ``note``: why it is
        not served where it asked (kept: ``check`` shows it after the holder is gone)."""
        old = self.records.get(key)
        new = Record(cluster, asked, noprefix, dict(indoms), note, dict(spills or {}))
        if old is not None:
            new.totals = old.totals  # a family's departed counts stay (credit() changes them)
            self._unlink(key, old, bool(old.all_clusters() - new.all_clusters()))
            del self.records[key]
        self.records[key] = new
        self._lines.pop(key, None)
        self._link(key, new)
        self.present.add(key)
        self.departed.pop(key, None)
        if old != new:  # new numbers: on disk before they are served (a file reloaded or
            self.dirty = True  # back with its own numbers costs no save)
        self._trim()

    def credit(self, key: Key, totals: dict[str, dict[int, float]]) -> None:
        """``key`` (a family's) has departed members' counts ``totals`` now: saved with
        the next save, so that an agent restart does not lose them."""
        record = self.records.get(key)
        if record is not None:
            record.totals = totals
            self._lines.pop(key, None)
            self.dirty = True

    def depart(self, key: Key) -> None:
        """``key`` is no longer served: its numbers stay its own (departed, newest)."""
        if key not in self.present:
            return
        self.present.discard(key)
        self._lines.pop(key, None)
        record = self.records.pop(key, None)
        if record is not None:
            self.records[key] = record  # saved with the next change (the order only
            self.departed[key] = None  # decides which departed name is forgotten first)
        self._trim()

    def forget(self, key: Key) -> Record | None:
        record = self.records.pop(key, None)
        self._lines.pop(key, None)
        self.departed.pop(key, None)
        if record is not None:
            self._unlink(key, record)
            self.present.discard(key)
            self.dirty = True
            self.evicted += 1
        return record

    def evict_cluster(self, usable: Callable[[int], bool]) -> tuple[int, list[Key]] | None:
        """The last resort when every cluster is held: the cluster of the longest-departed
        key whose cluster is ``usable`` (not served) is freed, every key holding it
        forgotten.  Returns (cluster, forgotten keys), or None."""
        for key in self._forgettable():
            record = self.records[key]
            if not all(usable(c) for c in record.all_clusters()):
                continue
            cluster = record.cluster
            gone = [k for k in self.records if k in self.clusters.get(cluster, ())]
            for k in gone:
                self.forget(k)
            return cluster, gone
        return None

    def _forgettable(self) -> Iterator[Key]:
        """The departed keys in the order they are forgotten: those of the owner who holds
        the most names first, each owner's longest departed first (ties: the owner of the
        longest departed first).  So a user who cycles names (a file per PID, or hostile)
        forgets its own names, never another user's departed ones."""
        counts = Counter(uid for _, uid in self.records)
        by_uid: dict[int, list[Key]] = {}
        for key in self.departed:
            by_uid.setdefault(key[1], []).append(key)
        for uid in sorted(by_uid, key=lambda u: -counts[u]):
            yield from by_uid[uid]

    def note_eviction(self, line: str) -> None:
        self.evictions = [*self.evictions[-9:], line]

    def _link(self, key: Key, record: Record) -> None:
        for cluster in record.all_clusters():
            _add(self.clusters, cluster, key)
        for serial in record.indoms.values():
            _add(self.serials, serial, key)

    def _unlink(self, key: Key, record: Record, release: bool = True) -> None:
        for cluster in record.all_clusters():  # its own and its spill clusters
            if _drop(self.clusters, cluster, key) and release:
                self.released += 1
        for serial in record.indoms.values():
            _drop(self.serials, serial, key)

    def _trim(self) -> None:
        """Beyond cap (+1/8, so that trimming is rare), the longest-departed go, down to cap."""
        if len(self.records) <= self.cap + self.cap // 8:
            return
        excess = len(self.records) - self.cap
        departed = list(itertools.islice(self._forgettable(), excess))
        for key in departed:
            self.forget(key)
        if departed and not self._capped:  # once: a directory of PID-named files does it
            self._capped = True  # every few hundred names, for ever
            self.log(
                f"identity registry: more than {self.cap} names remembered (--registry-cap): "
                f"the longest departed are forgotten from now on, from {describe(departed[0])}"
            )

    # -- persistence

    def load(self) -> None:
        """Read :attr:`path` (nothing when None or missing); a file that cannot be used is
        logged once and the registry starts empty (it is rewritten at the next save)."""
        if self.path is None:
            return
        self.secret, self._secret_saved = read_secret(f"{self.path}.key")
        try:
            text = _read(self.path)
        except FileNotFoundError:
            return
        except OSError as e:
            self._problem(f"cannot read: {e.strerror}; starting empty")
            return
        try:
            records = _parse(text, self.cap + self.cap // 8)
        except (ValueError, TypeError, KeyError, AttributeError, RecursionError) as e:
            self._problem(
                f"not a usable registry ({e}); starting empty, rewritten at the next change"
            )
            self.dirty = True
            return
        for key, record in records:
            if key in self.records:
                continue
            self.records[key] = record
            self.departed[key] = None  # until a scan serves it
            self._link(key, record)

    def save(self) -> bool:
        """Write the registry if it changed (atomically); False when that failed (logged
        once per cause, the agent goes on from memory)."""
        if not self.dirty:
            return True
        self.dirty = False
        if self.path is None or self.readonly:
            return True
        directory = os.path.dirname(self.path) or "."
        tmp = f"{self.path}.{os.getpid()}.tmp"
        try:
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
            try:  # never through a name planted before (a symlink to a file pcp may write)
                fd = os.open(tmp, flags, 0o644)
            except FileExistsError:  # left by an agent of this PID killed mid-save, or planted
                os.unlink(tmp)
                fd = os.open(tmp, flags, 0o644)
            try:
                os.write(fd, self.text().encode("utf-8", "surrogateescape"))
                os.fsync(fd)
            finally:
                os.close(fd)
            os.rename(tmp, self.path)
            if not self._secret_saved:  # before the numbers it derived are served
                write_secret(f"{self.path}.key", self.secret)
                self._secret_saved = True
            dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
        except OSError as e:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            self._problem(f"cannot save: {e.strerror}; numbers kept in memory only")
            return False
        self.saves += 1
        if self.problem:
            self.log(f"{self.path}: identity registry saved again")
            self.problem = ""
        return True

    def text(self) -> str:
        """The file's contents: a header line, then one record a line, oldest first (each
        record's line is kept until it changes: 10,000 names cost ~30 ms to encode anew)."""
        lines = self._lines
        for key in self.records.keys() - lines.keys():
            r = self.records[key]
            doc = {
                "name": key[0],
                "uid": key[1],
                "cluster": r.cluster,
                "asked": r.asked,
                "noprefix": r.noprefix,
                "indoms": {str(s): p for s, p in sorted(r.indoms.items())},
                **({"spills": {n: list(ci) for n, ci in r.spills.items()}} if r.spills else {}),
                **({"totals": _totals_doc(r.totals)} if r.totals else {}),
                "present": key in self.present,
            }
            if r.note:
                doc["note"] = r.note
            lines[key] = json.dumps(doc)
        body = ",\n".join(lines[key] for key in self.records)
        return f'{{"version": {VERSION}, "names": [\n{body}\n]}}\n'

    def _problem(self, why: str) -> None:
        line = f"{self.path}: identity registry: {why}"
        if line != self.problem:
            self.log(line)
        self.problem = line


def _read(path: str) -> str:
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


def _add(table: dict[int, tuple[Key, ...]], number: int, key: Key) -> None:
    """``key`` holds ``number``."""
    held = table.get(number, ())
    if key not in held:
        table[number] = (*held, key)


def _drop(table: dict[int, tuple[Key, ...]], number: int, key: Key) -> bool:
    """``key`` no longer holds ``number``; True when no key does."""
    held = table.get(number)
    if held is not None and key in held:
        rest = tuple(k for k in held if k != key)
        if not rest:
            del table[number]
            return True
        table[number] = rest
    return False


def _int(value: Any, low: int, high: int) -> int:
    if type(value) is not int or not low <= value <= high:
        raise ValueError(f"{value!r} is not a number from {low} to {high}")
    return value


def _parse(text: str, keep: int) -> Iterable[tuple[Key, Record]]:
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
