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

import itertools
import os
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Final

from pmda_mmv.namespace.registryfile import (
    VERSION,
    Key,
    Record,
    parse,
    read,
    record_line,
    write_atomically,
)
from pmda_mmv.namespace.secret import read_secret, write_secret

CAP: Final = 10_000
"""Remembered keys (present and departed) before the longest-departed are forgotten."""
SUFFIX: Final = ".mmv-identity.json"
NONE: Final = ("", "none")
"""``--registry`` values for a registry in memory only."""

Log = Callable[[str], None]


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
            text = read(self.path)
        except FileNotFoundError:
            return
        except OSError as e:
            self._problem(f"cannot read: {e.strerror}; starting empty")
            return
        try:
            records = parse(text, self.cap + self.cap // 8)
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
        try:
            write_atomically(
                self.path,
                self.text().encode("utf-8", "surrogateescape"),
                self._save_secret,  # after the rename, before the directory's fsync
            )
        except OSError as e:
            self._problem(f"cannot save: {e.strerror}; numbers kept in memory only")
            return False
        self.saves += 1
        if self.problem:
            self.log(f"{self.path}: identity registry saved again")
            self.problem = ""
        return True

    def _save_secret(self) -> None:
        """Write the secret beside the registry the first time it is saved: before the
        numbers it derived are served."""
        if not self._secret_saved:
            assert self.path is not None
            write_secret(f"{self.path}.key", self.secret)
            self._secret_saved = True

    def text(self) -> str:
        """The file's contents: a header line, then one record a line, oldest first (each
        record's line is kept until it changes: 10,000 names cost ~30 ms to encode anew)."""
        lines = self._lines
        for key in self.records.keys() - lines.keys():
            r = self.records[key]
            lines[key] = record_line(key, r, key in self.present)
        body = ",\n".join(lines[key] for key in self.records)
        return f'{{"version": {VERSION}, "names": [\n{body}\n]}}\n'

    def _problem(self, why: str) -> None:
        line = f"{self.path}: identity registry: {why}"
        if line != self.problem:
            self.log(line)
        self.problem = line


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
