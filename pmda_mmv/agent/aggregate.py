"""A family metric's values per fetch: the members' values aggregated (docs/families.md).

:class:`FamilyTable` is the table builder :class:`~pmda_mmv.agent.serving.Serving`
keeps for a family PMID (:mod:`pmda_mmv.namespace.family`): at the first value asked of it
in a fetch it builds each live member's table (the member's own builder, from this fetch's
snapshot of the member's file, shared with the member's own names), and folds them by
instance: counters are the sum plus the departed members' counts; instant and discrete
metrics by the family's mode.  The cost is that of fetching the members' own metrics, plus
one dictionary operation per value.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from pmda_mmv.mmvfile import layout
from pmda_mmv.namespace.familyrules import Family
from pmda_mmv.namespace.served import ServedMetric

Built = tuple[dict[int, Any] | list[Any], dict[int, Any]]
Table = Callable[[], "Built | None"]
Part = Callable[[ServedMetric], Table]
WRAP: Final = 1 << 64
"""A summed unsigned counter is served modulo 2^64: a sum past the type's range wraps, as
one writer's u64 counter does, and PCP's rate conversion counts a wrap as one."""
UNSIGNED: Final = (layout.TYPE_U64, layout.TYPE_U32)


class FamilyTable:
    """The table builder of one family metric (see the module docstring); ``part`` gives
    a member's table builder of its metric."""

    __slots__ = ("counter", "family", "mode", "name", "part", "wrap")

    def __init__(self, family: Family, fsm: ServedMetric, part: Part) -> None:
        self.family = family
        self.name = fsm.metric.name
        self.mode = family.mode(fsm)
        self.counter = fsm.semantics == 1 and self.mode == "sum"  # not a string counter
        self.wrap = self.counter and fsm.type in UNSIGNED
        self.part = part

    def __call__(self) -> Built | None:
        with self.family.lock:  # the departures thread credits departed members
            return self._build()

    def _build(self) -> Built | None:
        fam, name = self.family, self.name
        holders = list(fam.holders.get(name, {}).values())
        if fam.gone:  # credited as they departed, before this thread unserved them
            holders = [sm for sm in holders if sm.file not in fam.gone]
        if self.mode == "mostrecent":  # the most recently started last: its values win
            files = fam.members
            holders.sort(key=lambda sm: (files[sm.file].mf.header.g1, sm.file))
        acc: dict[int, Any] = {}
        if self.counter:
            acc.update(fam.totals.get(name, {}))
        fresh = False
        for sm in holders:
            built = self.part(sm)()
            if built is None:
                continue
            fresh = True
            values = built[0]
            if self.counter:
                fam.saw(sm.file, name, values)
            pairs = values.items() if isinstance(values, dict) else enumerate(values)
            _fold(acc, pairs, self.mode)
        if not fresh and not acc and holders:
            return None  # no member has a snapshot in this fetch: PM_ERR_AGAIN
        if self.wrap:  # a counter wrap, as a writer's own u64 wraps (PCP's rates take it)
            acc = {k: v % WRAP if type(v) is int else v for k, v in acc.items()}
        return acc, {}


def _fold(acc: dict[int, Any], pairs: Any, mode: str) -> None:
    if mode == "sum":
        for k, v in pairs:
            acc[k] = acc.get(k, 0) + v
    elif mode == "mostrecent":
        acc.update(pairs)
    elif mode == "min":
        for k, v in pairs:
            old = acc.get(k)
            acc[k] = v if old is None or v < old else old
    else:
        for k, v in pairs:
            old = acc.get(k)
            acc[k] = v if old is None or v > old else old
