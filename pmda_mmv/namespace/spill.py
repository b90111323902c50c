"""Spill clusters (docs/spill.md): where a file's metrics the C agent would drop are served.

A spilled metric keeps the PMID remembered for its file and name; new ones are placed in
name order at ``fnv1a32(name) & 1023`` with linear probing, in the file's spill clusters in
the order they were taken, a new cluster when they are full.  At most :data:`SPILL_CAP`
names are remembered a file.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Final

from pmda_mmv.mmvfile import layout, limits

SPILL_CAP: Final = 2 * limits.MAX_ENTRIES[layout.TOC_METRICS]
"""Spilled metric names remembered per file (present ones always): past this the oldest
departed names are forgotten, and their PMIDs may be given again."""
ITEMS: Final = limits.MAX_ITEM + 1


def fnv1a32(data: bytes) -> int:
    """32-bit FNV-1a of ``data``: the hash Speed and Hornet take items from."""
    h = 0x811C9DC5
    for b in data:
        h = ((h ^ b) * 0x01000193) & 0xFFFFFFFF
    return h


def place(
    wanted: list[str],
    known: dict[str, tuple[int, int]],
    mine: Collection[int],
    free_cluster: Callable[[], int | None],
    refuse: Callable[[str], None],
) -> tuple[dict[str, tuple[int, int]], list[int]]:
    """The PMIDs of the spilled metric names ``wanted`` (in name order): a ``known`` one
    (remembered) unless its cluster is in ``mine`` (another file's now), else a new one.
    ``free_cluster`` gives a further cluster (None when none is free: the name is passed to
    ``refuse``).  Returns every remembered name's PMID and the spill clusters in order."""
    spills = {n: ci for n, ci in known.items() if ci[0] not in mine}
    excess = len(spills.keys() | set(wanted)) - SPILL_CAP
    if excess > 0:  # the oldest departed names are forgotten
        present = set(wanted)
        departed = [n for n in spills if n not in present]
        for n in departed[:excess]:
            del spills[n]
    used: dict[int, set[int]] = {}
    for c, i in spills.values():
        used.setdefault(c, set()).add(i)
    order = list(used)
    for name in wanted:
        if name in spills:
            continue
        home = fnv1a32(name.encode("utf-8", "surrogateescape")) & limits.MAX_ITEM
        cluster = next((c for c in order if len(used[c]) < ITEMS), None)
        if cluster is None:
            cluster = free_cluster()
            if cluster is None:
                refuse(name)
                continue
            order.append(cluster)
            used[cluster] = set()
        taken = used[cluster]
        item = next(i % ITEMS for i in range(home, home + ITEMS) if i % ITEMS not in taken)
        taken.add(item)
        spills[name] = (cluster, item)
    return spills, order


def summary(count: int, clusters: list[int]) -> str:
    """What a file spilled: ``count`` metrics, under ``clusters``."""
    return (
        f"{count} metric{'s' if count != 1 else ''} the C agent would drop served "
        f"under spill cluster{'s' if len(clusters) > 1 else ''} {', '.join(map(str, clusters))}"
    )
