"""Which cluster each served file is served under, and the choice of one for a newcomer.

The rules are the catalogue's (:mod:`~.catalogue`, the identity registry :mod:`~.registry`):
a file's header cluster when it is free or shareable, a returning name's own, else the
lowest free cluster, evicting the longest-departed holder when every cluster is held.
"""

from __future__ import annotations

from collections.abc import Container
from typing import Protocol

from pmda_mmv.mmvfile import layout, limits
from pmda_mmv.mmvfile.pcpdefs import Log
from pmda_mmv.mmvfile.reader import MmvFile
from pmda_mmv.namespace.registry import Registry
from pmda_mmv.namespace.registryfile import Key, describe

Asked = Container[int]
"""The clusters the files of a scan ask for in their headers (:meth:`Clusters.free`)."""


class Sharing(Protocol):
    """What :meth:`Clusters.choose` asks of the served files (the catalogue answers)."""

    def shareable(self, mf: MmvFile, cluster: int) -> bool:
        """Whether ``mf`` may join the files serving ``cluster``."""
        ...

    def served_to(self, cluster: int) -> str:
        """One file served under ``cluster``, by name."""
        ...


class Clusters:
    """The clusters held by served files: ``held_by`` (cluster -> (owner uid, files)) and
    ``spill_owner`` (spill cluster -> the file it is served to), written here only."""

    def __init__(self, registry: Registry, log: Log, info: Log) -> None:
        self.registry = registry
        self.log, self.info = log, info
        self.identity = ""  # why the last choose moved a file (FileEntry.identity)
        self._evicted = ""  # the eviction the last choose made, as a note
        self._free_below = 1  # the lowest cluster that may be neither served nor held
        registry.released_listeners.append(self._released)
        self.held_by: dict[int, tuple[int, int]] = {}  # cluster -> (owner uid, files)
        self.spill_owner: dict[int, str] = {}  # spill cluster -> the file it is served to
        self._taken_below = 1  # the lowest cluster that may be free: a cluster-0 file's
        # search starts there (from 1, N such files cost N^2 / 2 steps)
        # the clusters no file of a scan asks for (for the ``requested`` set ``_asked``), and
        # the first of them that may be free: a scan whose files ask for every cluster, and
        # are moved off theirs one after the other, costs 4,095 steps, not 4,095^2 / 2
        self._asked: Asked | None = None
        self._unasked: list[int] = []
        self._unasked_at = 0

    def _released(self) -> None:
        """The registry freed a held cluster: the next search starts again from 1."""
        self._free_below = 1
        self._unasked_at = 0

    def take(self, cluster: int, uid: int) -> None:
        """One more file of owner ``uid`` (unless another's already) serves ``cluster``."""
        owner, count = self.held_by.get(cluster, (uid, 0))
        self.held_by[cluster] = (owner, count + 1)
        self._advance()

    def hold(self, cluster: int, uid: int, name: str | None = None) -> None:
        """Reserve ``cluster`` for owner ``uid`` alone; with ``name``, as the cluster served
        to ``name`` only (a file's spill cluster, a family's cluster): no file shares it."""
        self.held_by[cluster] = (uid, 1)
        if name is not None:
            self.spill_owner[cluster] = name

    def hold_free(self, requested: Asked, uid: int, name: str | None = None) -> int | None:
        """A :meth:`free` cluster, held as :meth:`hold` says; None when none is free."""
        cluster = self.free(requested)
        if cluster is not None:
            self.hold(cluster, uid, name)
        return cluster

    def hold_spills(self, clusters: list[int], uid: int, name: str) -> None:
        """Reserve ``clusters`` as file ``name``'s (owner ``uid``) spill clusters."""
        for c in clusters:
            self.hold(c, uid, name)
        self._advance()

    def release(self, cluster: int, spills: list[int]) -> int:
        """One file fewer serves ``cluster``; its ``spills`` are freed.  Returns how many
        clusters are free now that were not."""
        freed = 0
        uid, count = self.held_by[cluster]
        if count > 1:
            self.held_by[cluster] = (uid, count - 1)
        else:
            del self.held_by[cluster]
            self._taken_below = min(self._taken_below, cluster)
            freed += 1
        for c in spills:
            del self.held_by[c]
            del self.spill_owner[c]
            self._taken_below = min(self._taken_below, c)
            freed += 1
        if freed:
            self._unasked_at = 0
        return freed

    def give_back(self, cluster: int) -> None:
        """``cluster``, held apart from any file (a family's), is free again."""
        self.held_by.pop(cluster, None)
        self.spill_owner.pop(cluster, None)
        self._taken_below = min(self._taken_below, cluster)
        self._unasked_at = 0

    def _advance(self) -> None:
        while self._taken_below in self.held_by:
            self._taken_below += 1

    def choose(self, mf: MmvFile, requested: Asked, sharing: Sharing) -> int | None:
        """The cluster for ``mf``: see the module rules and :mod:`~.registry`;
        ``requested`` holds clusters other files in the directory ask for, ``sharing``
        judges joining a served cluster.  None when all 4095 are served.
        :attr:`identity` says why a file is not served where it asked."""
        taken, registry = self.held_by, self.registry
        key: Key = (mf.name, mf.uid)
        asked = mf.header.cluster
        record = registry.get(key)
        self.identity = ""
        if record is not None and asked in (0, record.asked):
            own = record.cluster  # a returning name: its own cluster, whoever asks for it
            if own not in taken or sharing.shareable(mf, own):
                if record.note:  # moved when it first came: said again, not logged
                    self.identity = record.note
                elif asked and own != asked:
                    self.identity = self._moved(mf, asked, own, sharing)
                return own
        if asked:
            if asked in taken:
                if sharing.shareable(mf, asked):
                    return asked
            else:
                holders = self.registry.holders(asked, key)
                if not holders or self._rejoins(mf, asked, holders):
                    return asked
            if record is not None and record.cluster not in taken:
                self.identity = self._moved(mf, asked, record.cluster, sharing)
                return record.cluster  # asks for another cluster it cannot have: keeps its own
        self._evicted = ""
        c = self.free(requested)
        if c is None:
            return None
        if asked:
            self.identity = self._moved(mf, asked, c, sharing)
            self.info(f"{mf.path}: {layout.header_field('cluster')}: {self.identity}")
        if self._evicted:
            self.identity = "; ".join(x for x in (self.identity, self._evicted) if x)
        return c

    def _moved(self, mf: MmvFile, asked: int, cluster: int, sharing: Sharing) -> str:
        """Why ``mf`` is served as ``cluster``, not the ``asked`` one, naming its holder."""
        if asked in self.held_by:
            holder = self.spill_owner.get(asked) or sharing.served_to(asked)
            who = f"served to {holder}"
        else:
            holders = self.registry.holders(asked, (mf.name, mf.uid))
            who = f"held by {describe(holders[0])} (departed)" if holders else "free now"
        return f"asked for cluster {asked}, {who}: served as cluster {cluster}"

    def _rejoins(self, mf: MmvFile, cluster: int, holders: list[Key]) -> bool:
        """Whether ``mf`` may take ``cluster``, held by departed ``holders`` only: a
        NOPREFIX file of the same owner rejoining the NOPREFIX files of one application
        that asked for that cluster (their processes come and go, PCP QA 648)."""
        if not mf.header.noprefix:
            return False
        for key in holders:
            record = self.registry.get(key)
            if record is None or key[1] != mf.uid or not record.noprefix:
                return False
            if record.asked != cluster:
                return False
        return True

    def free(self, requested: Asked) -> int | None:
        """The lowest cluster neither served nor held by a remembered name, preferring
        those no other file of the directory asks for; when none, the longest-departed
        holder of a cluster is evicted (logged, :attr:`Registry.evictions`)."""
        taken, registry = self.held_by, self.registry
        # clusters below it are all served, or held by a remembered name (N newcomers past
        # N departed names' clusters cost N steps, not N^2 / 2)
        first = max(self._taken_below, self._free_below)
        unasked = self._free_unasked(requested, first)
        if unasked is not None:
            return unasked
        for c in range(first, limits.MAX_CLUSTER + 1):
            if c not in taken and not registry.cluster_held(c):
                self._free_below = c
                return c
        self._free_below = limits.MAX_CLUSTER + 1
        evicted = registry.evict_cluster(lambda c: c not in taken)
        if evicted is None:
            return None
        cluster, gone = evicted
        line = (
            f"identity registry: every cluster is served or remembered: cluster {cluster} "
            f"of {', '.join(describe(k) for k in gone)} (departed longest) is given again"
        )
        registry.evictions = [*registry.evictions[-9:], line]
        self.log(line)
        held = ", ".join(describe(k) for k in gone)
        self._evicted = f"cluster {cluster} was {held}'s (departed longest): every cluster was held"
        return cluster

    def _free_unasked(self, requested: Asked, first: int) -> int | None:
        """The lowest cluster from ``first`` on that is free and not in ``requested``;
        None when there is none.  The clusters not in ``requested`` are listed once per
        ``requested`` object (a scan's), and searched from where the last search stopped
        (every cluster before it is served or held: a cluster freed since starts it again)."""
        if not requested:
            return None  # the lowest free cluster is the lowest unasked one: free's own walk
        if requested is not self._asked:
            self._asked = requested
            self._unasked = [c for c in range(1, limits.MAX_CLUSTER + 1) if c not in requested]
            self._unasked_at = 0
        taken, registry = self.held_by, self.registry
        unasked = self._unasked
        at = self._unasked_at
        while at < len(unasked):
            c = unasked[at]
            if c >= first and c not in taken and not registry.cluster_held(c):
                self._unasked_at = at
                return c
            at += 1
        self._unasked_at = at
        return None
