"""A file's outline: what decides whether it can meet another file in the namespace, read
without validating it (:func:`outline`): its header (checked as :func:`~.parse.header.read_header`
checks it: a file that fails it is never served), owner, inode, size, its TOC's entry counts,
and its metrics' items and names (the first component of each).  One ``pread`` of its start
(``HEAD``), and of its METRICS sections and a version 2 file's name strings when they lie
past it.

An outline is an upper bound of what the agent would serve from the file, never a verdict:
``check FILE`` uses the outlines of the files beside ``FILE`` to decide which of them can
change the agent's verdict on it (:mod:`pmda_mmv.commands.checkscope`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from pmda_mmv.mmvfile import layout, limits
from pmda_mmv.mmvfile.errors import MmvError
from pmda_mmv.mmvfile.opener import open_regular
from pmda_mmv.mmvfile.parse.header import read_header
from pmda_mmv.mmvfile.parse.strings import cstring

HEAD = 16384
"""Bytes read from the start of each file: a small file's header, TOC and metrics."""


@dataclass(slots=True)
class Outline:
    """What one file could take and meet (see the module docstring).  ``names`` holds the
    first component of each metric name, as the parser decodes it.  ``complete``: False
    when a METRICS section could not be read whole (past the file's end, or more entries
    than a file may hold): its items and names are then unknown."""

    size: int
    uid: int
    inode: tuple[int, int]
    cluster: int
    noprefix: bool
    counts: dict[int, int] = field(default_factory=dict)  # TOC type -> entries, summed
    items: list[int] = field(default_factory=list)
    names: set[str] = field(default_factory=set)
    complete: bool = True  # its items and names read whole

    @property
    def metrics(self) -> int:
        return self.counts.get(layout.TOC_METRICS, 0)

    @property
    def spills(self) -> int:
        """How many of its metrics may spill (an item past ``limits.MAX_ITEM``, or the
        item of an earlier metric of the file): at most one cluster each."""
        if not self.complete:
            return self.metrics
        seen: set[int] = set()
        n = 0
        for item in self.items:
            n += item > limits.MAX_ITEM or item in seen
            seen.add(item)
        return n


def outline(path: str, dir_fd: int | None = None) -> Outline | None:
    """The outline of the file at ``path`` (relative to ``dir_fd`` when given; its last
    component never followed, nothing but a regular file opened: :func:`~.opener.open_regular`);
    None when the agent would not serve it at all: it cannot be opened or is not a regular
    file, or its header is refused or not ready."""
    try:
        fd, st = open_regular(path, dir_fd)
    except OSError:  # NotRegular too
        return None
    try:
        head = os.pread(fd, HEAD, 0)
        if len(head) < layout.HEADER_SIZE:
            return None  # not written yet, too small, or changed while read
        try:
            header = read_header(path, head, st.st_size)
        except MmvError:
            return None
        found = Outline(
            st.st_size,
            st.st_uid,
            (st.st_dev, st.st_ino),
            header.cluster,
            bool(header.flags & layout.FLAG_NOPREFIX),
        )
        first = layout.HEADER_SIZE
        tocs = layout.TOC.iter_unpack(head[first : first + header.tocs * layout.TOC_SIZE])
        for ttype, count, offset in tocs:
            found.counts[ttype] = found.counts.get(ttype, 0) + count
            if ttype == layout.TOC_METRICS and found.complete:
                found.complete = _metrics(found, fd, head, header.version, count, offset)
        return found
    except OSError:
        return None
    finally:
        os.close(fd)


def _metrics(found: Outline, fd: int, head: bytes, version: int, count: int, at: int) -> bool:
    """Add the items and names of one METRICS section of ``count`` entries; False when it
    cannot be read whole."""
    entry = layout.METRIC_V1 if version == 1 else layout.METRIC_V2
    end = at + count * entry.size
    if count > limits.MAX_ENTRIES[layout.TOC_METRICS] or end > found.size:
        return False
    data = head[at:end] if end <= len(head) else os.pread(fd, end - at, at)
    if len(data) != end - at:
        return False
    for raw, item, *_ in entry.iter_unpack(data):
        found.items.append(item)
        name = cstring(raw) if version == 1 else _string(fd, head, raw, found.size)
        if name is not None:  # else the metric is skipped: it meets nothing
            found.names.add(name.split(".", 1)[0])
    return True


def _string(fd: int, head: bytes, offset: int, size: int) -> str | None:
    """The string entry at ``offset`` as the parser reads a name (None: it would not)."""
    end = offset + layout.STRING_SIZE
    if offset < layout.HEADER_SIZE or end > size:
        return None
    return cstring(head[offset:end] if end <= len(head) else os.pread(fd, end - offset, offset))
