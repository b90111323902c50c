"""The identity registry: every number the agent gave a file, kept across restarts, without PCP.

A file's identity is its name and owner (uid), a family's its name, owner and kind:
:data:`~.registryfile.Key`.  Each key's :class:`~.registryfile.Record`: cluster, header
cluster asked for, NOPREFIX, indom serials (``{file serial: PCP serial}``), spilled metric
PMIDs (docs/spill.md); a family's counts, ledger and descriptors (docs/families.md).  Keys
are kept in last-seen order (moved to the end when served and when departed); served keys
are *present*, the others *departed*.  Rules (:mod:`~.catalogue`; docs/identity.md):

* A number held by a key (present or departed) is never given to another key while
  never-held numbers remain; a returning key gets its own numbers back.
* Bounded in names and bytes: past ``cap`` keys or ``cap`` * BYTES_PER_NAME bytes,
  departed keys are forgotten (numbers free again), each time the longest departed of the
  owner who has departed the most (:meth:`Registry._trim`): a user cycling names forgets
  its own, never another's.  Served keys are never forgotten; a spilled metric name costs
  a bounded amount (:func:`~.registryfile.spill_key`).  When every cluster is held, the
  last resort frees a departed holder's (:meth:`Registry.evict_cluster`).
* Persistence (:mod:`~.registryfile`, :mod:`~.registryjournal`): :meth:`save`, called
  before a new number is served, appends what changed to the journal (fsynced), and writes
  the file whole only when the journal has grown past the registry: a save costs what
  changed.  A missing file is an empty registry; an unusable one is logged once and rebuilt;
  one past the read limit loads its newest records; a failed save is logged once (per
  cause) and the agent goes on serving from memory.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Final

from pmda_mmv.mmvfile.pcpdefs import Log
from pmda_mmv.namespace import registryjournal
from pmda_mmv.namespace.registryfile import (
    MAX_BYTES,
    Holders,
    Key,
    Ledger,
    Record,
    Totals,
    add_holder,
    describe,
    drop_holder,
    record_body,
    spill_key,
)
from pmda_mmv.namespace.registryjournal import changes_text, document
from pmda_mmv.namespace.registrykept import Kept
from pmda_mmv.namespace.secret import read_secret, write_secret

CAP: Final = 10_000
"""Remembered keys (present and departed) before the longest-departed are forgotten."""
BYTES_PER_NAME: Final = 400
"""An owner's records are bounded at ``cap`` times this many bytes (4 MB at the default
cap: 10,000 names take 1.5 MB; a file with 4,096 spilled names of any length 200 kB)."""
OWNER_QUOTAS: Final = 8
"""Owners' quotas the registry keeps in all before one owner's departed names go for
another's (the owner who has departed the most first)."""
SUFFIX: Final = ".mmv-identity.json"
NONE: Final = ("", "none")  # the --registry values of a registry in memory only


def default_path(var_dir: str, domain: int) -> str:
    """``$PCP_VAR_DIR/config/pmda/<domain>.mmv-identity.json``."""
    return os.path.join(var_dir, "config", "pmda", f"{domain}{SUFFIX}")


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
        self.byte_cap = self.cap * BYTES_PER_NAME
        self._keep = self.cap + self.cap // 8  # names read, and kept before trimming
        self.log: Log = log or (lambda line: None)
        self.readonly = readonly
        self.records: dict[Key, Record] = {}  # last-seen order, oldest first
        self.present: set[Key] = set()
        self.departed: dict[Key, None] = {}  # the keys not present, longest departed first
        self.clusters: dict[int, Holders] = {}  # cluster -> keys holding it, first first
        self.serials: dict[int, Holders] = {}  # PCP indom serial -> keys holding it
        self.dirty = False
        self.evictions: list[str] = []  # the last evictions, as logged (newest last)
        self.evicted = 0  # keys forgotten so far (cap and pool exhausted)
        self.problem = ""  # the last load or save problem ("" when none)
        self.saves = 0
        self.released_listeners: list[Callable[[], None]] = []  # told: a cluster is unheld
        self.bytes = 0  # of every record's line in the file
        self._lines: dict[Key, str] = {}  # each record's JSON (record_body), until it changes
        self._gone: dict[int, dict[Key, int]] = {}  # owner -> its departed keys, in order
        self._seq = 0  # (each numbered as it departed)
        self._gone_bytes: Counter[int] = Counter()  # owner -> its departed keys' bytes
        self._owned: Counter[int] = Counter()  # owner -> its keys
        self._owned_bytes: Counter[int] = Counter()  # owner -> its keys' bytes
        self._changed: dict[Key, None] = {}  # since the last save (the journal's lines)
        self._journal = registryjournal.Journal(path or "")
        self._capped: set[tuple[str, int]] = set()  # the caps reached (each logged once)
        self.secret, self._secret_saved = read_secret(None)  # random: saved with the registry

    # -- queries

    def get(self, key: Key) -> Record | None:
        return self.records.get(key)

    def spills(self, key: Key, wanted: list[str]) -> dict[str, tuple[int, int]]:
        """``key``'s spilled metric PMIDs, by name for those ``wanted`` (others as kept)."""
        names, record = {spill_key(n): n for n in wanted}, self.records.get(key)
        return {names.get(k, k): ci for k, ci in (record.spills if record else {}).items()}

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
        kept = {spill_key(n): ci for n, ci in (spills or {}).items()}
        new = Record(cluster, asked, noprefix, dict(indoms), note, kept)
        if old is not None:
            new.totals, new.credited, new.kept = old.totals, old.credited, old.kept  # a family's
            self._unlink(key, old, bool(old.all_clusters() - new.all_clusters()))
        self._put(key, new, old != new, present=True)
        self._link(key, new)
        if old != new:  # new numbers: on disk before they are served (a file reloaded or
            self.dirty = True  # back with its own numbers costs no save)
        self._trim(key[1])

    def credit(self, key: Key, totals: Totals, credited: Ledger, kept: Kept | None = None) -> None:
        """A family's departed counts, ledger and (given) descriptors: saved at the next save."""
        record = self.records.get(key)
        if record is not None:
            record.totals, record.credited = totals, list(credited)
            record.kept = record.kept if kept is None else kept
            self._put(key, record, True, present=key in self.present)
            self.dirty = True

    def depart(self, key: Key) -> None:
        """``key`` is no longer served: its numbers stay its own (departed, newest)."""
        if key not in self.present:
            return
        record = self.records.get(key)
        if record is not None:  # saved with the next change (the order only decides
            self._put(key, record, False, present=False)  # which departed name goes first)
        self._trim(key[1])

    def forget(self, key: Key) -> Record | None:
        record = self._pop(key)
        if record is not None:
            self._unlink(key, record)
            self._changed[key] = None
            self.dirty = True
            self.evicted += 1
        return record

    def _put(self, key: Key, record: Record, changed: bool, present: bool) -> None:
        """``key`` holds ``record`` (its JSON encoded anew when ``changed``), newest."""
        body = None if changed else self._lines.get(key) or record.body
        record.body = ""
        self._pop(key)
        self.records[key] = record
        self._lines[key] = body = body or record_body(key, record)
        self.bytes += _size(body)
        self._owned[key[1]] += 1
        self._owned_bytes[key[1]] += _size(body)
        self._changed[key] = None
        if present:
            self.present.add(key)
        else:
            self.departed[key] = None
            self._seq += 1
            self._gone.setdefault(key[1], {})[key] = self._seq
            self._gone_bytes[key[1]] += _size(body)

    def _pop(self, key: Key) -> Record | None:
        record = self.records.pop(key, None)
        body = self._lines.pop(key, None)
        if body:
            self.bytes -= _size(body)
            self._owned[key[1]] -= 1
            self._owned_bytes[key[1]] -= _size(body)
        self.present.discard(key)
        if self.departed.pop(key, 0) is None and body:
            self._gone_bytes[key[1]] -= _size(body)
            gone = self._gone[key[1]]
            del gone[key]
            if not gone:
                del self._gone[key[1]], self._gone_bytes[key[1]]
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
        """The departed keys in the order the pool's last resort forgets them: those of the
        owner who has departed the most names first, each owner's longest departed first
        (ties: the owner of the longest departed first)."""
        for uid in sorted(self._gone, key=lambda u: (-len(self._gone[u]), self._oldest(u))):
            yield from list(self._gone[uid])

    def _oldest(self, uid: int) -> int:  # when owner uid's longest departed key departed
        return next(iter(self._gone[uid].values()))

    def _link(self, key: Key, record: Record) -> None:
        for cluster in record.all_clusters():
            add_holder(self.clusters, cluster, key)
        for serial in record.indoms.values():
            add_holder(self.serials, serial, key)

    def _unlink(self, key: Key, record: Record, release: bool = True) -> None:
        for cluster in record.all_clusters():  # its own and its spill clusters
            if drop_holder(self.clusters, cluster, key) and release:
                for listener in self.released_listeners:
                    listener()
        for serial in record.indoms.values():
            drop_holder(self.serials, serial, key)

    def _trim(self, uid: int) -> None:
        """Owner ``uid``'s quota: past ``cap`` names or ``byte_cap`` bytes of its own (+1/8,
        so that trimming is rare) its longest departed go, down to the quota; only past
        OWNER_QUOTAS quotas of departed keys in all, the most departed owner's."""
        if self._owned[uid] > self._keep:
            self._forget_of("names", self.cap, lambda: self._owned[uid], lambda: uid)
        if self._owned_bytes[uid] > self.byte_cap * 9 // 8:
            self._forget_of("bytes", self.byte_cap, lambda: self._owned_bytes[uid], lambda: uid)
        if len(self.departed) > OWNER_QUOTAS * self._keep:
            departed = lambda: len(self.departed)  # noqa: E731
            self._forget_of("names", OWNER_QUOTAS * self.cap, departed, self._most)
        if self._gone_bytes.total() > OWNER_QUOTAS * self.byte_cap * 9 // 8:
            gone = self._gone_bytes.total
            self._forget_of("bytes", OWNER_QUOTAS * self.byte_cap, gone, self._most)

    def _most(self) -> int:
        """The owner who has departed the most bytes (ties: the longest departed)."""
        return max(self._gone, key=lambda u: (self._gone_bytes[u], -self._oldest(u)), default=-2)

    def _forget_of(
        self, what: str, limit: int, held: Callable[[], int], owner: Callable[[], int]
    ) -> None:
        """Forget the longest departed of ``owner()`` while ``held()`` exceeds ``limit``."""
        first = None
        while held() > limit and (uid := owner()) in self._gone:
            key = next(iter(self._gone[uid]))
            first = first or key
            self.forget(key)
        if first is not None and (what, limit) not in self._capped:  # once: a directory of
            self._capped.add((what, limit))  # PID-named files does it every few hundred names
            self.log(
                f"identity registry: more than {limit} {what} remembered (--registry-cap): "
                f"the longest departed are forgotten from now on, from {describe(first)}"
            )

    # -- persistence

    def load(self) -> None:
        """Read :attr:`path` and its journal (nothing when None or missing); a file that
        cannot be used is logged once and the registry starts empty (it is rewritten at
        the next save); one past the read limit loads its newest records."""
        if self.path is None:
            return
        self.secret, self._secret_saved = read_secret(f"{self.path}.key")
        try:
            changes, size, big, epoch = registryjournal.load(self.path, self._keep)
        except FileNotFoundError:
            return
        except OSError as e:
            self._problem(f"cannot read: {e.strerror}; starting empty")
            return
        except (ValueError, TypeError, KeyError, AttributeError, RecursionError) as e:
            self._problem(
                f"not a usable registry ({e}); starting empty, rewritten at the next change"
            )
            self.dirty = True
            return
        if big:
            self._problem(f"larger than {MAX_BYTES >> 20} MiB: its newest {big} names read")
        self.dirty = not epoch  # version 1, or too large: rewritten at the next save
        self._replay(changes)
        if size and not self.readonly:
            self._journal.reopen(size)  # a line cut short is cut off

    def _replay(self, changes: list[tuple[Key, Record | None]]) -> None:
        """The records read (all departed until a scan serves them), then the journal's."""
        for key, record in changes:
            old = self._pop(key)
            if old is not None:
                self._unlink(key, old)
            if record is not None:
                self._put(key, record, not record.body, present=False)
                self._link(key, record)
        self._changed.clear()
        for uid in list(self._owned):
            self._trim(uid)
        self._changed.clear()
        self.evicted = 0

    def save(self) -> bool:
        """Make every change since the last save durable (its journal's lines appended and
        fsynced, or the file written whole: see the module docstring); False when that
        failed (logged once per cause, the agent goes on from memory)."""
        if not self.dirty:
            return True
        self.dirty = False
        if self.path is None or self.readonly:
            self._changed.clear()
            return True
        if not self._secret_saved:  # written with the file written whole
            self._journal.close()
        try:
            self._journal.save(
                lambda: changes_text(self._changed, self._lines, self.present),
                lambda epoch: document(self.records, self._lines, self.present, epoch),
                self.bytes,
                self._save_secret,
            )
        except OSError as e:
            self._problem(f"cannot save: {e.strerror}; numbers kept in memory only")
            return False
        finally:
            self._changed.clear()
        self.saves += 1
        if self.problem:
            self.log(f"{self.path}: identity registry saved again")
            self.problem = ""
        return True

    def _save_secret(self) -> None:
        """Write the secret beside the registry at its first save (before its numbers serve)."""
        if not self._secret_saved:
            assert self.path is not None
            write_secret(f"{self.path}.key", self.secret)
            self._secret_saved = True

    def text(self) -> str:
        """The file's contents, as a save that writes it whole writes them."""
        whole = document(self.records, self._lines, self.present, "")
        return whole.decode(errors="surrogateescape")

    def _problem(self, why: str) -> None:
        line = f"{self.path}: identity registry: {why}"
        if line != self.problem:
            self.log(line)
        self.problem = line


def _size(body: str) -> int:
    """A record's bytes in the file: its JSON, whether it is present, the separator."""
    return len(body) + 20
