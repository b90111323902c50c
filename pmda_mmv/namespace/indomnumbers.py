"""PCP instance domain numbers for the files' indoms, without PCP.

PCP indom serials (22 bits) are chosen by the catalogue (:func:`choose_indom`): the C agent's
number, ``((cluster << 11) | serial) & 0x3FFFFF``, whenever no other served indom holds it;
otherwise a number derived from the file name and serial under the agent's secret
(:func:`derived_indom`; linear probing), which does not depend on load order and which no
other local user can predict from the name.  A derived number is remembered
per (file name, serial), as clusters are, so the indom keeps it when its writer restarts
and while other files come and go.  Files sharing a cluster share its indoms.  Within one
scan, a pair that packs without loss (cluster and serial below 2048) wins its number over
a pair that overflows.
"""

from __future__ import annotations

import hashlib
from collections.abc import Container
from typing import Final

from pmda_mmv.mmvfile import limits

INDOM_MASK: Final = limits.MAX_SERIAL
"""PCP indom serials are 22 bits; serial 0 is the agent's own (the status indom)."""
AGENT_SERIALS: Final = frozenset({0, 1})
"""The PCP indom serials the agent serves its own indoms under (the status indom and the
states indom, :mod:`pmda_mmv.agent.control`): never a file's."""
PROBES: Final = 4096
"""Numbers tried after a derived indom serial before the search goes on over every number."""


def c_indom(cluster: int, serial: int) -> int:
    """The C agent's PCP indom serial for a file indom: ``(cluster << 11) | serial`` in 22
    bits (pmdammv-reference.md 5.3); pairs with a cluster or serial of 2048 or more alias."""
    return ((cluster << 11) | serial) & INDOM_MASK


def packs(cluster: int, serial: int) -> bool:
    """Whether ``c_indom`` packs the pair without loss (no other such pair has its number)."""
    return cluster < 2048 and serial < 2048


def derived_indom(name: str, serial: int, secret: bytes) -> int:
    """Where the search for a number of its own starts for indom ``serial`` of file
    ``name`` (1..INDOM_MASK): a keyed hash (BLAKE2b) of the name and serial under the
    agent's ``secret`` (the registry's, :mod:`~.registry`), so that another user, knowing
    a victim's file name, cannot fill the numbers its search tries (an unkeyed CRC-32 could
    be computed and its window filled by a few files).  The same for the same
    file and serial while the secret is the same (the registry's: across agent restarts)."""
    digest = hashlib.blake2b(
        f"{name}\0{serial}".encode("utf-8", "surrogateescape"), digest_size=8, key=secret
    ).digest()
    return int.from_bytes(digest, "little") % INDOM_MASK + 1


def choose_indom(
    name: str,
    cluster: int,
    serial: int,
    own: int | None,
    used: Container[int],
    wanted: set[int],
    secret: bytes,
) -> int | None:
    """The PCP serial for indom ``serial`` of file ``name`` served in ``cluster``: ``own``
    (the number it had before) when free, else C's number when free and not wanted by a
    lossless pair, else the first free number from its derived one (after PROBES of them,
    any free number); None when none at all is free.  ``used``: the numbers served or held
    by another name."""
    if own is not None and own not in used:
        return own
    number = c_indom(cluster, serial)
    if number and number not in used and (packs(cluster, serial) or number not in wanted):
        return number
    start = derived_indom(name, serial, secret) - 1
    for k in range(PROBES):
        number = (start + k) % INDOM_MASK + 1
        if number not in used and number not in wanted:
            return number
    # PROBES numbers from the derived one are taken (only by chance, or by files filling
    # much of the 4 million): any free number, so that no file is refused
    # for want of a serial while one is free; one wanted by a lossless pair last
    fallback = None
    for k in range(PROBES, INDOM_MASK):
        number = (start + k) % INDOM_MASK + 1
        if number not in used:
            if number not in wanted:
                return number
            if fallback is None:
                fallback = number
    return fallback
