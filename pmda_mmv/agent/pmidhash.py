"""Keep libpcp_pmda's PMID hash from growing with every metric-table rebuild (PCP < 7.0.1).

python3-pcp calls ``pmdaRehash`` whenever the metric table changes, so at every file this
agent adds or removes.  ``pmdaRehash`` empties the PMID hash (an ``__pmHashCtl`` inside
libpcp_pmda's private ``e_ext_t``) with a walk that frees the nodes but, before PCP 7.0.1
(upstream commit 737a18aca2 in libpcp's ``__pmHashWalkCB``, "fix accounting within
__pmHashCtl after walk-based-delete"), never lowers its node count.  The count therefore
sums every PMID ever hashed, and each rebuild grows a bucket array to a quarter of it and
walks it: on PCP 6.0.3 a rebuild of 450 metrics takes 0.03 ms at first, 1.4 ms once a
million PMIDs have been hashed (a 2 MiB array), 116 ms after 100 million
(``benchmarks/rehash.py``; 0.03 ms throughout with the reset).  Under
churning files (or a local user churning them on purpose) the agent slows down without
bound, and glibc's heap grows in steps (the soak test: RSS 23.5 -> 56.2 MiB in 10 minutes).

:class:`PmidHashCount` finds that count and, before each rebuild, sets it back to the number
of PMIDs actually in the hash.  Nothing is dereferenced in this process: memory is read and
written through ``/proc/self/mem`` (opened before the agent drops privileges), where a bad
address is an ``OSError``, not a crash, and the count is written only after a cycle of
pointers confirms what it is.  Layouts, from PCP's headers (6.0.3 and 7.x alike):

- ``pmdaInterface`` (pmda.h): ``int domain``, ``comm`` (32 bits), ``int status``, then
  ``version.any.ext``, the ``pmdaExt *`` (python3-pcp's cpmda keeps a static one);
- ``pmdaExt`` (pmda.h): ``e_flags`` (``PMDA_EXT_FLAG_HASHED`` when the hash is in use),
  ``e_ext`` (the ``e_ext_t *``), ..., ``e_domain``, ``e_nmetrics``;
- ``e_ext_t`` (libpcp_pmda/src/libdefs.h): ``pmdaInterface *dispatch`` (the back pointer
  that closes the cycle), ``res``, then ``hashpmids``, an ``__pmHashCtl`` (libpcp.h) whose
  first field is ``int nodes``.
"""

from __future__ import annotations

import ctypes
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Final, TypeGuard, TypeVar

from pmda_mmv.mmvfile.pcpdefs import PMDA_EXT_FLAG_HASHED


def _typed(ctype: type[Any], names: str) -> list[tuple[str, type[Any]]]:
    """``_fields_`` entries: each of the space-separated ``names`` of C type ``ctype``."""
    return [(name, ctype) for name in names.split()]


class PmdaInterfaceHead(ctypes.Structure):
    """pmda.h ``pmdaInterface`` up to ``version.any.ext``."""

    _fields_ = [
        ("domain", ctypes.c_int),
        ("comm", ctypes.c_uint),
        ("status", ctypes.c_int),
        ("ext", ctypes.c_void_p),
    ]


class PmdaExtHead(ctypes.Structure):
    """pmda.h ``pmdaExt`` up to ``e_nmetrics``."""

    _fields_ = [
        ("e_flags", ctypes.c_uint),
        *_typed(ctypes.c_void_p, "e_ext e_sockname e_name e_logfile e_helptext"),
        *_typed(ctypes.c_int, "e_status e_infd e_outfd e_port e_singular e_ordinal e_direct"),
        *_typed(ctypes.c_int, "e_domain e_nmetrics"),
    ]


class PmHashCtl(ctypes.Structure):
    """libpcp.h ``__pmHashCtl``."""

    _fields_ = [
        *_typed(ctypes.c_int, "nodes hsize"),
        *_typed(ctypes.c_void_p, "hash next"),
        ("index", ctypes.c_uint),
    ]


class EExtHead(ctypes.Structure):
    """libpcp_pmda/src/libdefs.h ``e_ext_t`` up to ``hashpmids``."""

    _fields_ = [
        ("dispatch", ctypes.c_void_p),
        ("res", ctypes.c_void_p),
        ("hashpmids", PmHashCtl),
    ]


NODES: Final = EExtHead.hashpmids.offset + PmHashCtl.nodes.offset
BSS_TAIL: Final = 1 << 16  # bytes of an anonymous mapping searched after a .so's own
T = TypeVar("T", PmdaExtHead, EExtHead, ctypes.c_int)


def writable_regions(path: str, pid: str = "self") -> list[tuple[int, int]]:
    """(start, end) of the writable mappings of the shared object at ``path`` in process
    ``pid``, each joined with an anonymous mapping that continues it (the rest of its .bss,
    at most BSS_TAIL bytes of it).  Raises OSError when /proc/PID/maps cannot be read."""
    target = os.path.realpath(path)
    regions: list[tuple[int, int]] = []
    with open(f"/proc/{pid}/maps") as maps:
        for line in maps:
            fields = line.split(maxsplit=5)
            start, end = (int(x, 16) for x in fields[0].split("-"))
            name = fields[5].strip() if len(fields) > 5 else ""
            if not fields[1].startswith("rw"):
                continue
            if name == target:
                regions.append((start, end))
            elif not name and regions and regions[-1][1] == start:  # its .bss, continued
                regions[-1] = (regions[-1][0], min(end, start + BSS_TAIL))
    return regions


@dataclass
class PmidHashCount:
    """The node count of one PMDA's PMID hash, found from its ``pmdaInterface``.

    ``ext`` is the ``pmdaExt`` address, ``nodes`` the address of ``hashpmids.nodes``;
    ``mem`` is an open ``/proc/self/mem`` descriptor (read-write)."""

    mem: int
    ext: int
    nodes: int

    @classmethod
    def find(
        cls, domain: int, regions: Iterable[tuple[int, int]], pid: str = "self"
    ) -> PmidHashCount | str:
        """Search ``regions`` (address ranges) of process ``pid`` for the
        ``pmdaInterface`` of ``domain``.

        Returns the count, or why it was not found (a string: no /proc/PID/mem, no
        candidate, or more than one).  Opens ``/proc/PID/mem``: call this before dropping
        privileges (the kernel checks access at open)."""
        path = f"/proc/{pid}/mem"
        try:
            mem = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        except OSError as e:
            return f"{path}: {e.strerror}"
        found = {c for start, end in regions for c in _candidates(mem, domain, start, end)}
        if len(found) == 1:
            ext, nodes = found.pop()
            return cls(mem, ext, nodes)
        os.close(mem)
        return f"{len(found)} candidate pmdaInterface structures for domain {domain}"

    def count(self) -> tuple[int, int]:
        """(node count, PMIDs in the metric table ``e_nmetrics``) now; raises OSError."""
        ext = _read(self.mem, self.ext, PmdaExtHead)
        return _read(self.mem, self.nodes, ctypes.c_int).value, ext.e_nmetrics

    def reset(self) -> int | None:
        """Lower the count to the PMIDs actually hashed (``e_nmetrics`` while the hash is in
        use, and while ``e_ext`` still leads to the count found); returns the count it
        replaced, None when it was already right.  Raises OSError (/proc/self/mem)."""
        ext = _read(self.mem, self.ext, PmdaExtHead)
        if not ext.e_flags & PMDA_EXT_FLAG_HASHED or ext.e_ext + NODES != self.nodes:
            return None
        nodes = _read(self.mem, self.nodes, ctypes.c_int).value
        if nodes <= ext.e_nmetrics:
            return None
        os.pwrite(self.mem, bytes(ctypes.c_int(ext.e_nmetrics)), self.nodes)
        return nodes

    def close(self) -> None:
        os.close(self.mem)


def locate(domain: int, module: str) -> PmidHashCount | str:
    """The count of ``domain``'s PMDA whose ``pmdaInterface`` is in the shared object
    ``module`` (python3-pcp's cpmda), or why it was not found."""
    try:
        regions = writable_regions(module)
    except OSError as e:
        return f"/proc/self/maps: {e.strerror}"
    return PmidHashCount.find(domain, regions)


def _candidates(mem: int, domain: int, start: int, end: int) -> Iterator[tuple[int, int]]:
    """(pmdaExt address, nodes address) for each pmdaInterface of ``domain`` in
    [start, end) whose ext -> e_ext -> dispatch pointers lead back to it."""
    try:
        data = os.pread(mem, end - start, start)
    except OSError:
        return
    want = bytes(ctypes.c_int(domain))
    size = ctypes.sizeof(PmdaInterfaceHead)
    for m in re.finditer(re.escape(want), data):
        offset = m.start()
        if offset % 8 or offset + size > len(data):
            continue
        head = PmdaInterfaceHead.from_buffer_copy(data, offset)
        if not _plausible(head.ext):
            continue
        try:
            ext = _read(mem, head.ext, PmdaExtHead)
            if ext.e_domain != domain or not _plausible(ext.e_ext):
                continue
            e_ext = _read(mem, ext.e_ext, EExtHead)
        except OSError:
            continue
        if e_ext.dispatch == start + offset:
            yield head.ext, ext.e_ext + NODES


def _plausible(pointer: int | None) -> TypeGuard[int]:
    """A pointer worth reading: not NULL (ctypes' None), not in page 0, and an off_t for
    ``os.pread``."""
    return pointer is not None and 4096 <= pointer < 1 << 63


def _read(mem: int, address: int, ctype: type[T]) -> T:
    size = ctypes.sizeof(ctype)
    data = os.pread(mem, size, address)
    if len(data) != size:
        raise OSError(f"short read at {address:#x}")
    return ctype.from_buffer_copy(data)
