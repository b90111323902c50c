"""Which entries of a directory can change the agent's verdict on one of them: the scope
of ``check FILE`` (:func:`scope`).

The agent serves a directory's files in name order, each judged against the files served
before it; a file meets another only through a name (one of its names equal to, above or
below one of the other's: the first component of a name below the prefix decides whether
they can), a cluster (asked for in the header, or remembered for the file in the identity
registry) or an inode (a hard link; a symlink is outlined as its target), and through
what all served files take together: the serving limits (``--max-total``,
``--max-names``, ``--max-indoms``, ``--max-instances``, the descriptor budget), the names
directly below the prefix (``nametree.MAX_CHILDREN``), the clusters (4,095: a file that
does not get the one it asked for, a cluster-0 file and a spilled metric each take a free
one) and the identity registry's quotas.  From every other file's
:func:`~.outline.outline` (header, TOC counts, metric items and names: no validation, no
values, no help text) the scope is ``FILE`` and the files that meet it, directly or
through one another; when the outlines cannot rule out that a total is reached, or a
NOPREFIX file's names could not be read, or the file asks for cluster 0 (the lowest free
one, which every file decides), or families are served (a member's verdict depends on the
others), the scope is the whole directory.

An outline over-states what the agent serves (every entry it counts may be skipped), so
a file left out of the scope cannot change the verdict; ``check`` still judges the file
with the whole directory when the scoped verdict shows the file moved to another cluster
or a metric spilled (those numbers come from the free clusters, which every file decides:
:meth:`~.check.Directory.settled`).
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field

from pmda_mmv.agent.options import ServingOptions
from pmda_mmv.directory import fdlimit
from pmda_mmv.directory.filestate import ignore_reason
from pmda_mmv.directory.policy import Skip, resolve
from pmda_mmv.mmvfile import limits
from pmda_mmv.mmvfile.layout import TOC_INDOMS, TOC_INSTANCES
from pmda_mmv.mmvfile.outline import Outline, outline
from pmda_mmv.namespace.nametree import MAX_CHILDREN
from pmda_mmv.namespace.registry import BYTES_PER_NAME, Registry
from pmda_mmv.namespace.registryfile import Record

RECORD_BYTES = 400
"""The most an identity registry record takes besides its file name, indoms and spills."""


@dataclass
class _File:
    """One entry of the directory: its outline, and the keys it meets others by."""

    name: str
    found: Outline
    clusters: set[int] = field(default_factory=set)
    parts: set[str] | None = None  # first name components below the prefix (None: any)
    record: Record | None = None  # its identity registry record


def scope(
    directory: str, name: str, options: ServingOptions, registry: Registry
) -> set[str] | None:
    """The entries of ``directory`` whose files can change the agent's verdict on entry
    ``name`` (``name`` with them); None: the whole directory (see the module docstring)."""
    if options.families:
        return None
    path = os.path.join(directory, name)
    try:
        st = os.lstat(path)
    except OSError:
        return {name}  # gone: the verdict says so
    if ignore_reason(name) is not None or not stat.S_ISREG(st.st_mode):
        return None if stat.S_ISLNK(st.st_mode) else {name}
    own = outline(path)  # a symlink: not followed (the whole directory, above)
    if own is None:
        return {name}  # never served: nothing beside it decides why
    if own.cluster == 0 or st.st_nlink > 1 or not own.complete:
        return None
    target = _File(name, own)
    _keys(target, registry)
    try:
        others = _others(directory, name, registry, options)
    except OSError:
        return None
    if any(f.parts is None for f in (target, *others)):
        return None  # a NOPREFIX file's names unread: it may meet any file
    if not _within_totals(target, others, options, registry):
        return None
    return {name, *(f.name for f in _meeting(target, others))}


def _others(directory: str, name: str, registry: Registry, options: ServingOptions) -> list[_File]:
    """The outlines of the directory's other entries the agent may serve, with their keys
    (a symlink outlined as its target, when the agent follows it: :func:`~.policy.resolve`;
    check as root never opens what the agent would not).  Raises OSError when the directory
    cannot be read."""
    others = []
    owners = set(options.owners) if options.owners is not None else None
    dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        with os.scandir(dir_fd) as entries:
            for entry in entries:
                if entry.name == name or ignore_reason(entry.name) is not None:
                    continue
                if entry.is_symlink():
                    path = os.path.join(directory, entry.name)
                    try:
                        target, _ = resolve(directory, path, os.lstat(path), owners)
                    except (Skip, OSError):
                        continue  # not followed by the agent: meets nothing
                    found = outline(target)
                else:
                    found = outline(entry.name, dir_fd)
                if found is not None:
                    others.append(_File(entry.name, found))
                    _keys(others[-1], registry)
    finally:
        os.close(dir_fd)
    return others


def _keys(f: _File, registry: Registry) -> None:
    """``f``'s clusters (asked for, and remembered) and first name components."""
    found = f.found
    if found.cluster:
        f.clusters.add(found.cluster)
    f.record = record = registry.get((f.name, found.uid))
    if record is not None:
        f.clusters |= record.all_clusters()
    if not found.noprefix:
        f.parts = {f.name.split(".", 1)[0]}
    elif found.complete:
        f.parts = found.names


def _meeting(target: _File, others: list[_File]) -> list[_File]:
    """The files of ``others`` meeting ``target``, directly or through one another."""
    by_cluster: dict[int, list[_File]] = {}
    by_part: dict[str, list[_File]] = {}
    met = [f for f in others if f.found.inode == target.found.inode]
    for f in others:
        for c in f.clusters:
            by_cluster.setdefault(c, []).append(f)
        for p in f.parts or ():
            by_part.setdefault(p, []).append(f)
    seen = {id(f) for f in met} | {id(target)}
    todo = [target, *met]
    while todo:
        f = todo.pop()
        near = [g for c in f.clusters for g in by_cluster.get(c, ())]
        near += [g for p in f.parts or () for g in by_part.get(p, ())]
        for g in near:
            if id(g) not in seen:
                seen.add(id(g))
                met.append(g)
                todo.append(g)
    return met


def _within_totals(
    target: _File, others: list[_File], options: ServingOptions, registry: Registry
) -> bool:
    """Whether every file of the directory served together stays within the totals that
    make one file's verdict depend on all of them (see the module docstring)."""
    files = [target.found, *(f.found for f in others)]
    prefixed = sum(not f.noprefix for f in files)
    below = prefixed + sum(f.metrics for f in files if f.noprefix)
    totals = (
        (sum(f.size for f in files), options.max_total),
        (sum(f.metrics for f in files), options.max_names),
        (sum(f.counts.get(TOC_INDOMS, 0) for f in files), options.max_indoms),
        (sum(f.counts.get(TOC_INSTANCES, 0) for f in files), options.max_instances),
        (2 * len(files) + 2, fdlimit.max_files()),  # a descriptor and a pidfd each
        (below, MAX_CHILDREN - 1),
        (_clusters_taken([target, *others], registry), limits.MAX_CLUSTER - 1),
        (len(registry.records) + sum(f.record is None for f in (target, *others)), registry.cap),
        (registry.bytes + sum(_record_bytes(f) for f in [target, *others]), registry.byte_cap),
    )
    return all(n <= most for n, most in totals)


def _record_bytes(f: _File) -> int:
    """The most ``f``'s identity registry record may take (names JSON-escaped)."""
    found = f.found
    escaped = 6 * len(os.fsencode(f.name))
    return (
        escaped
        + RECORD_BYTES
        + 40 * found.counts.get(TOC_INDOMS, 0)
        + 6 * BYTES_PER_NAME * found.spills
    )


def _clusters_taken(files: list[_File], registry: Registry) -> int:
    """The most clusters the files and the registry's records may hold together: those
    asked for and remembered, and a free one for each file that may not get its own (it
    asks for cluster 0, or shares a cluster with another file that may not let it join:
    another owner, an item or a first name component in common) and each metric that may
    spill."""
    asked: dict[int, list[_File]] = {}
    for f in files:
        asked.setdefault(f.found.cluster, []).append(f)
    free = len(asked.pop(0, ())) + sum(f.found.spills for f in files)
    for group in asked.values():
        if len(group) > 1 and not _may_share(group):
            free += len(group)
    return len(asked.keys() | registry.clusters.keys()) + free


def _may_share(group: list[_File]) -> bool:
    """Whether the files of ``group``, asking for one cluster, can all be served in it:
    prefixed files of one owner, no item or first name component in common, every item
    read."""
    items: set[int] = set()
    parts: set[str] = set()
    count = 0
    for f in group:
        found = f.found
        if found.uid != group[0].found.uid or not found.complete or found.noprefix:
            return False
        items.update(found.items)
        parts.update(f.parts or ())
        count += len(found.items)
    return len(items) == count and len(parts) == len(group)
