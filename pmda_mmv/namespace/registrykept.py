"""A family's metric descriptors as the identity registry keeps them (docs/families.md):
what its members' files defined (each metric's item, type, semantics, units, indom and help
text; each indom's instances and help text), so that a family with credited counts is
served again after an agent restart before any member's file is.

In the registry file it is the family record's ``"descriptors"``: ``{"metrics": {NAME:
[item, type, semantics, units, indom or null, member, oneline or null, helptext or
null]}, "indoms": {SERIAL: [[[id, name], ...], oneline or null, helptext or null]}}``
(``member``: the file whose definition it is).  A record without it (an older agent's) is
read as keeping none.  Bounded when kept (:func:`bounded`): help text goes first, then all.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any, Final

KEPT_BYTES: Final = 64 << 10
"""The most bytes a family's kept descriptors take in the registry (help text is dropped
first, then every descriptor: such a family is served again when a member's file is)."""
MAX_ITEM: Final = 1023
U32: Final = (1 << 32) - 1


@dataclass(frozen=True, slots=True)
class KeptIndom:
    """One indom of the family's members: its instances (id, name) and help text."""

    instances: tuple[tuple[int, str], ...]
    oneline: str | None = None
    helptext: str | None = None


@dataclass(frozen=True, slots=True)
class KeptMetric:
    """One metric of the family's members as member ``whose`` defined it; ``indom``: the
    members' file serial of its indom, None when it has none."""

    item: int
    type: int
    semantics: int
    units: int
    indom: int | None
    whose: str
    oneline: str | None = None
    helptext: str | None = None


@dataclass(frozen=True, slots=True)
class Kept:
    """A family's descriptors: its metrics by name, its indoms by the members' serial."""

    metrics: dict[str, KeptMetric] = field(default_factory=dict)
    indoms: dict[int, KeptIndom] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.metrics)


def kept_doc(kept: Kept) -> dict[str, Any]:
    """``kept`` as the record's ``"descriptors"`` object."""
    return {
        "metrics": {
            n: [m.item, m.type, m.semantics, m.units, m.indom, m.whose, m.oneline, m.helptext]
            for n, m in kept.metrics.items()
        },
        "indoms": {
            str(s): [[list(i) for i in d.instances], d.oneline, d.helptext]
            for s, d in sorted(kept.indoms.items())
        },
    }


def bounded(kept: Kept, limit: int = KEPT_BYTES) -> Kept:
    """``kept`` within ``limit`` bytes: as it is, else without help text, else nothing."""
    if _size(kept) <= limit:
        return kept
    bare = Kept(
        {n: replace(m, oneline=None, helptext=None) for n, m in kept.metrics.items()},
        {s: KeptIndom(d.instances) for s, d in kept.indoms.items()},
    )
    return bare if _size(bare) <= limit else Kept()


def _size(kept: Kept) -> int:
    return len(json.dumps(kept_doc(kept)).encode("utf-8", "surrogateescape"))


def parse_kept(name: str, doc: Any) -> Kept:
    """A record's ``"descriptors"`` as read, checked; raises ValueError (and the like)."""
    if doc is None:
        return Kept()
    if not isinstance(doc, dict):
        raise ValueError(f"{name}: descriptors is not an object")
    metrics, indoms = doc.get("metrics", {}), doc.get("indoms", {})
    if not isinstance(metrics, dict) or not isinstance(indoms, dict):
        raise ValueError(f"{name}: descriptors: metrics and indoms are not objects")
    kept = Kept(
        {str(n): _metric(name, m) for n, m in metrics.items()},
        {_int(int(s), 0, U32): _indom(name, d) for s, d in indoms.items()},
    )
    for m in kept.metrics.values():
        if m.indom is not None and m.indom not in kept.indoms:
            raise ValueError(f"{name}: descriptors: indom {m.indom} is not kept")
    return kept


def _metric(name: str, doc: Any) -> KeptMetric:
    if not isinstance(doc, list) or len(doc) != 8:
        raise ValueError(f"{name}: descriptors: a metric is not a list of 8")
    item, mtype, sem, units, indom, whose, oneline, helptext = doc
    return KeptMetric(
        _int(item, 0, MAX_ITEM),
        _int(mtype, 0, 255),
        _int(sem, 0, 255),
        _int(units, 0, U32),
        None if indom is None else _int(indom, 0, U32),
        _text(name, whose),
        _help(name, oneline),
        _help(name, helptext),
    )


def _indom(name: str, doc: Any) -> KeptIndom:
    if not isinstance(doc, list) or len(doc) != 3 or not isinstance(doc[0], list):
        raise ValueError(f"{name}: descriptors: an indom is not [instances, help, help]")
    if not all(isinstance(i, list) and len(i) == 2 for i in doc[0]):
        raise ValueError(f"{name}: descriptors: an instance is not [id, name]")
    instances = tuple((_int(i, -(1 << 31), (1 << 31) - 1), _text(name, n)) for i, n in doc[0])
    return KeptIndom(instances, _help(name, doc[1]), _help(name, doc[2]))


def _int(value: Any, low: int, high: int) -> int:
    if type(value) is not int or not low <= value <= high:
        raise ValueError(f"{value!r} is not a number from {low} to {high}")
    return value


def _text(name: str, value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{name}: descriptors: {value!r} is not a string")
    return value


def _help(name: str, value: Any) -> str | None:
    return None if value is None else _text(name, value)
