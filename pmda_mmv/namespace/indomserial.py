"""Which indoms of a file are served, and the PCP indom serial each one gets, without PCP.

Only an indom a metric of the file is over is served (:func:`used_indoms`): a client
reaches an indom only through a metric's descriptor.  Its PCP serial (22 bits) is the one
the files sharing its cluster serve it under, else the one the identity registry remembers
for the file (:mod:`~.registry`), else that of a departed file of its cluster, else one
:func:`~.indomnumbers.choose_indom` picks among the numbers neither served nor held by
another remembered name; the C numbers the files of one scan ask for
(:func:`wanted_indoms`) are left to them.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Collection, Iterable

from pmda_mmv.mmvfile.reader import MmvFile
from pmda_mmv.namespace.indomnumbers import AGENT_SERIALS, c_indom, choose_indom, packs
from pmda_mmv.namespace.registry import Registry

DEPARTED_LOOKS = 16
"""Departed files of a cluster looked at for the number of an indom (they agree)."""


def used_indoms(mf: MmvFile) -> list[int]:
    """The file-local serials of ``mf``'s indoms that at least one of its metrics is
    over, in file order: the only ones served."""
    used = {m.indom for m in mf.metrics if m.indom is not None}
    return [serial for serial in mf.indoms if serial in used]


def wanted_indoms(files: Iterable[MmvFile]) -> set[int]:
    """The C numbers that the lossless (cluster, serial) pairs of ``files`` (one scan's,
    with their header clusters) ask for: overflowing pairs and derived numbers leave
    them free."""
    return {
        c_indom(mf.header.cluster, s)
        for mf in files
        for s in used_indoms(mf)
        if mf.header.cluster and packs(mf.header.cluster, s)
    }


def indom_serial(
    registry: Registry,
    served: Collection[int],
    file: tuple[str, int],
    at: tuple[int, int],
    wanted: set[int],
) -> int | None:
    """The PCP serial for indom ``serial`` of ``file`` (its name and owner uid) served in
    ``cluster`` (``at``: the two), when no file sharing the cluster serves it already;
    ``served``: the PCP serials served now.  A number another remembered name holds is not
    given, nor one of the agent's own (:data:`~.indomnumbers.AGENT_SERIALS`); None when no
    number at all is free."""
    (name, uid), (cluster, serial) = file, at

    def taken(number: int) -> bool:
        return number in served or number in AGENT_SERIALS

    record = registry.get(file)
    own = record.indoms.get(serial) if record is not None else None
    if own is not None and not taken(own):
        return own  # its own number (only files it shares a cluster with hold it too)
    # rejoining the departed files of its cluster (a few looked at: they agree)
    for other in itertools.islice(registry.clusters.get(cluster, ()), DEPARTED_LOOKS):
        r = registry.get(other)
        number = r.indoms.get(serial) if r and r.cluster == cluster else None
        if other[1] == uid and number is not None and not taken(number):
            return number

    def used(number: int) -> bool:
        return taken(number) or registry.serial_held(number, file)

    return choose_indom(name, cluster, serial, None, _Used(used), wanted, registry.secret)


class _Used:
    """A container of the PCP indom serials not to give (served or held)."""

    __slots__ = ("_used",)

    def __init__(self, used: Callable[[int], bool]) -> None:
        self._used = used

    def __contains__(self, number: object) -> bool:
        return isinstance(number, int) and self._used(number)
