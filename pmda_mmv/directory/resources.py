"""What the served files of one directory take of the agent's resources, and the limits a
file to serve is checked against, without PCP.

:class:`Limits` are the options (``--max-size``, ``--max-total``, ``--max-names``,
``--max-indoms``, ``--max-instances``); :class:`Resources` counts what the served files
use (bytes, descriptors, metric names, served indoms and their instances, the clusters
their headers ask for, their inodes) and says why one more would not fit.

Hard links: a regular entry whose inode is served (or opened by the same scan) under
another name is refused, naming it, and looked at again when that name goes.  The C agent
maps every name, so N links to one big file cost it N loads and N copies per fetch; a
symlink to a file beside it is still served under its own name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from pmda_mmv.directory import fdlimit
from pmda_mmv.mmvfile.errors import Problem
from pmda_mmv.mmvfile.reader import DEFAULT_MAX_SIZE, MmvFile
from pmda_mmv.namespace.indomserial import used_indoms
from pmda_mmv.namespace.served import FileEntry

Inode = tuple[int, int]

MAX_TOTAL: Final = 1 << 30  # bytes of all served files together (--max-total)
MAX_NAMES: Final = 500_000
"""Metric names of all served files together (--max-names): about 0.8 GB of the agent at
1.6 KB a name (the C agent has no bound and was dropped at 1M names)."""
MAX_INDOMS: Final = 100_000
"""Served indoms of all served files together (--max-indoms): an indom no metric uses is
not served and does not count."""
MAX_INSTANCES: Final = 2_000_000
"""Instances of the served indoms of all served files together (--max-instances)."""


@dataclass(frozen=True, slots=True)
class Limits:
    """The most one file (``max_size``) and all served files together may take."""

    max_size: int = DEFAULT_MAX_SIZE
    max_total: int = MAX_TOTAL
    max_names: int = MAX_NAMES
    max_indoms: int = MAX_INDOMS
    max_instances: int = MAX_INSTANCES


class Resources:
    """What the served files take, against ``limits`` and the descriptor budget
    (``max_files``, :mod:`~.fdlimit`); the files one scan opened but has not served yet
    count too (:meth:`opened`, until :meth:`scanned`)."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.max_files = fdlimit.max_files()  # descriptors of served files and pidfds
        self._names = 0  # metric entries of the served files
        self._indoms = 0  # served indoms of the served files
        self._insts = 0  # their instances
        self._opening = 0  # files one scan opened that were not served before
        self._total = 0  # bytes of the served files
        self._loading = 0  # bytes of the files one scan opened, not served yet
        self._asked: dict[int, int] = {}  # header cluster -> served files asking for it
        self._inodes: dict[Inode, str] = {}  # served inode -> its name (not via symlinks)
        self._links: dict[Inode, set[str]] = {}  # inode -> names refused as its hard links
        self._link_of: dict[str, Inode] = {}  # name refused as a hard link -> that inode

    def requested(self) -> set[int]:
        """The clusters the served files' headers ask for."""
        return {c for c, n in self._asked.items() if n}

    def opened(self, size: int, was: FileEntry | None) -> None:
        """A scan opened a file of ``size`` bytes, served before as ``was`` (or not)."""
        self._loading += size - (was.mf.size if was else 0)
        self._opening += was is None

    def scanned(self) -> None:
        """The scan's opened files are served or refused: only served files count."""
        self._loading = self._opening = 0

    def add(self, entry: FileEntry, name: str, inode: Inode | None) -> None:
        """``entry`` is served as ``name`` (from ``inode``, None through a symlink)."""
        _count(self._asked, entry.mf.header.cluster, 1)
        self._total += entry.mf.size
        self._names += len(entry.metrics)
        self._indoms += len(entry.indoms)
        self._insts += _instance_count(entry)
        if inode is not None:
            self._inodes[inode] = name

    def remove(self, entry: FileEntry, inode: Inode | None) -> list[str]:
        """``entry`` is no longer served: the names refused as hard links of its
        ``inode``, in order, to look at again (one of them may be served now)."""
        _count(self._asked, entry.mf.header.cluster, -1)
        self._total -= entry.mf.size
        self._names -= len(entry.metrics)
        self._indoms -= len(entry.indoms)
        self._insts -= _instance_count(entry)
        if inode is not None:
            self._inodes.pop(inode, None)
        return self.links(inode)

    def links(self, inode: Inode | None) -> list[str]:
        """The names refused as hard links of ``inode``, forgotten: to look at again."""
        names = [] if inode is None else sorted(self._links.pop(inode, ()))
        for name in names:
            self._link_of.pop(name, None)
        return names

    def gone(self, name: str) -> None:
        """The entry ``name`` left the directory: it is no longer remembered as a hard
        link (links made and removed in a loop would grow the agent without bound)."""
        inode = self._link_of.pop(name, None)
        if inode is None:
            return
        names = self._links.get(inode, set())
        names.discard(name)
        if not names:
            self._links.pop(inode, None)

    def linked(
        self, name: str, path: str, inode: Inode, loading: dict[Inode, str]
    ) -> Problem | None:
        """Why ``name`` is refused when its ``inode`` is served, or opened by this scan
        (``loading``), under another name (a hard link); it is then remembered, to be
        looked at again when that name goes.  None: it is not."""
        holder = self._inodes.get(inode) or loading.get(inode)
        if holder is None or holder == name:
            return None
        self.gone(name)  # a link of another inode before: remembered once, here
        self._links.setdefault(inode, set()).add(name)
        self._link_of[name] = inode
        return Problem(
            path=path, field="file", message=f"same file as {holder} (hard link), file not served"
        )

    def over_total(self, path: str, size: int, was: FileEntry | None) -> Problem | None:
        """Why a file of ``size`` bytes (served before as ``was``) would take the served
        files past max_total (None: it fits, or max_size refuses it anyway)."""
        others = self._total + self._loading - (was.mf.size if was else 0)
        limits = self.limits
        if size > limits.max_size or others + size <= limits.max_total:
            return None
        why = f"the served files would hold more than {limits.max_total} bytes (--max-total)"
        message = f"file size {size}: {why}, file not served"  # the whole file's size
        return Problem(path=path, message=message, limit=limits.max_total)

    def over_files(self, path: str, was: FileEntry | None, open: tuple[int, int]) -> Problem | None:
        """Why serving one more file (its descriptor and maybe a pidfd) would take the
        served files' descriptors past max_files (None: it fits, or ``was`` served);
        ``open``: the files served and the pidfds watching their writers."""
        served, watched = open
        used = served + watched + 2 * self._opening  # a file and its pidfd
        if was is not None or used + 2 <= self.max_files:
            return None
        why = f"{served} files served, the most the descriptor limit allows (RLIMIT_NOFILE)"
        return Problem(
            path=path,
            field="file",
            message=f"{why}, file not served",
            limit=self.max_files,
        )

    def over_counts(self, mf: MmvFile) -> Problem | None:
        """Why serving ``mf`` would take the served files past ``--max-names``,
        ``--max-indoms`` or ``--max-instances`` (None: it fits).  Indoms no metric uses
        are not served and do not count."""
        used = [mf.indoms[s] for s in used_indoms(mf)]
        instances = sum(len(d.instances) for d in used)
        limits = self.limits
        for what, n, unit, have, most in (
            ("metrics", len(mf.metrics), "names", self._names, limits.max_names),
            ("indoms", len(used), "indoms", self._indoms, limits.max_indoms),
            ("indoms", instances, "instances", self._insts, limits.max_instances),
        ):
            if have + n > most:
                why = f"the served files would have more than {most} (--max-{unit})"
                return Problem(
                    path=mf.path,
                    field=what,
                    message=f"{n} {unit}: {why}, file not served",
                    limit=most,
                )
        return None


def _instance_count(entry: FileEntry) -> int:
    return sum(len(si.indom.instances) for si in entry.indoms.values())


def _count(table: dict[int, int], key: int, step: int) -> None:
    n = table.get(key, 0) + step
    if n:
        table[key] = n
    else:
        table.pop(key, None)
