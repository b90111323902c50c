"""The requests of ``pminfo -fTl ROOT`` without pminfo's printing (:func:`sweep`).

Tests that put a hostile population before the agent ask for everything under ``mmv``, to
reach every file: names, descriptors, values, instances, help texts and labels of every
level.  pminfo formats every value and merges every instance's labels for printing, and
that took most of their time, in pminfo, not in the agent: six 30 MiB files (5.76 million
values) cost pminfo 41 s of CPU for ``-f`` and ``-l`` and the agent 4.5 s.  The agent's
side is the same kinds of request: the names, then in batches of 128 metrics (pminfo's
``-b`` default) their descriptors and values, each metric's help texts and item labels,
and once each the labels of the domain, each cluster and each indom, each indom's
instances and instance labels; the answers are counted, not decoded (labels through
libpcp directly, not python3-pcp's per-instance JSON).
"""

from __future__ import annotations

import ctypes
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import cpmapi as c_api
from pcp import pmapi

BATCH = 128  # pminfo's -b default: metrics per descriptor lookup and fetch

GONE = frozenset(
    {
        c_api.PM_ERR_NOAGENT,
        c_api.PM_ERR_TIMEOUT,
        c_api.PM_ERR_IPC,
        c_api.PM_ERR_NOTCONN,
        c_api.PM_ERR_NOCONTEXT,
    }
)
"""Errors that say the agent (or pmcd) stopped answering, not that one metric has none."""


class AgentGone(AssertionError):
    """A request of the sweep failed as a dropped agent fails (:data:`GONE`)."""


@dataclass
class Swept:
    """What the sweep was answered: names, values (fetched instances), instances listed,
    help texts, instance label sets, and the per-metric errors (code -> count) that do not
    say the agent is gone (a metric with no help text, a value not available ...)."""

    names: int = 0
    values: int = 0
    instances: int = 0
    texts: int = 0
    instance_labels: int = 0
    errors: dict[int, int] = field(default_factory=dict)


def sweep(host: str, root: str = "mmv") -> Swept:
    """Every request ``pminfo -h HOST -fTl ROOT`` makes of the agent; raises
    :class:`AgentGone` when one fails as a dropped agent's does."""
    ctx = pmapi.pmContext(c_api.PM_CONTEXT_HOST, host)
    swept = Swept()
    names: list[str] = []
    asked: set[object] = set()  # (level, key) of the labels asked for once
    _call(swept, ctx.pmTraversePMNS, root, names.append)
    swept.names = len(names)
    for batch in _batches(names):
        pmids = _call(swept, ctx.pmLookupName, batch)
        if pmids is None:  # a name gone meanwhile: the others one by one
            found = [_call(swept, ctx.pmLookupName, [name]) for name in batch]
            batch = [name for name, pmid in zip(batch, found, strict=True) if pmid is not None]
            pmids = [pmid[0] for pmid in found if pmid is not None]
            if not pmids:
                continue
        descs = _call(swept, ctx.pmLookupDescs, pmids)
        result = _call(swept, ctx.pmFetch, pmids)
        if result is not None:
            for k in range(len(batch)):
                n = result.contents.get_numval(k)
                if n < 0:
                    swept.errors[n] = swept.errors.get(n, 0) + 1
                else:
                    swept.values += n
            ctx.pmFreeResult(result)
        for k, pmid in enumerate(pmids):
            _metric(ctx, swept, pmid, descs[k] if descs is not None else None, asked)
    return swept


def _metric(
    ctx: pmapi.pmContext, swept: Swept, pmid: int, desc: object | None, asked: set[object]
) -> None:
    """One metric's help texts (``-T``: the full one where there is a one-line one), labels
    of every level (``-l``: the domain's, each cluster's and indom's, and each indom's
    instance labels once; the item's) and, over an indom, its instances (``-f``, once)."""
    if _call(swept, ctx.pmLookupText, pmid, c_api.PM_TEXT_ONELINE) is not None:
        swept.texts += 1 + (_call(swept, ctx.pmLookupText, pmid, c_api.PM_TEXT_HELP) is not None)
    lib = pmapi.LIBPCP
    for level, request, key in (
        ("domain", lib.pmGetDomainLabels, lib.pmID_domain(pmid)),
        ("cluster", lib.pmGetClusterLabels, pmid & ~0x3FF),  # its item 0: the same cluster
    ):
        if (level, key) not in asked:
            asked.add((level, key))
            _labels(swept, request, key)
    _labels(swept, lib.pmGetItemLabels, pmid)
    indom = pmapi.get_indom(desc) if desc is not None else c_api.PM_INDOM_NULL
    if indom == c_api.PM_INDOM_NULL or ("indom", indom) in asked:
        return
    asked.add(("indom", indom))
    _labels(swept, lib.pmGetInDomLabels, indom)
    found = _call(swept, ctx.pmGetInDom, None, indom)
    swept.instances += len(found[0]) if found else 0  # type: ignore[index]
    swept.instance_labels += _labels(swept, lib.pmGetInstancesLabels, indom)


def _labels(swept: Swept, request: Any, key: int) -> int:
    """Label sets asked for through libpcp (``request(key, &sets)``), freed undecoded."""
    sets = ctypes.POINTER(pmapi.pmLabelSet)()
    n = int(request(key, ctypes.byref(sets)))
    if n < 0:
        _failed(swept, n)
        return 0
    if n > 0:
        pmapi.LIBPCP.pmFreeLabelSets(sets, n)
    return n


def _call(swept: Swept, request: object, *args: object) -> object | None:
    """``request(*args)``; None when it failed with an error that does not say the agent is
    gone (counted in ``swept.errors``)."""
    try:
        return request(*args)  # type: ignore[operator]
    except pmapi.pmErr as e:
        _failed(swept, e.args[0])
        return None


def _failed(swept: Swept, code: int) -> None:
    if code in GONE:
        raise AgentGone(f"{pmapi.pmErr(code)} (error {code})")
    swept.errors[code] = swept.errors.get(code, 0) + 1


def _batches(names: list[str]) -> Iterator[list[str]]:
    for k in range(0, len(names), BATCH):
        yield names[k : k + BATCH]
