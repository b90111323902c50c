"""A family served without pmcd: the catalogue, the family rules and the serving model fed
files from the test-only byte builder, as the agent's glue feeds them
(tests/unit/namespace/test_family.py, tests/unit/directory/test_containers.py)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pmda_mmv.agent.serving import Serving
from pmda_mmv.mmvfile import layout
from pmda_mmv.mmvfile.pcpdefs import PM_IN_NULL
from pmda_mmv.mmvfile.reader import MmvFile
from pmda_mmv.namespace.catalogue import Catalogue
from pmda_mmv.namespace.family import Families
from pmda_mmv.namespace.familyspec import parse_family
from pmda_mmv.namespace.registry import Registry
from tests.support.mmvbuild import Indom, Instance, Metric, MmvBuilder, Value

COUNT = 1 << 20  # pmUnits count^1


def member(
    requests: tuple[int, int] = (0, 0),
    busy: int = 0,
    generation: int = 0x5F5E1000000001,
    busy_type: int = layout.TYPE_U32,
    units: int = COUNT,
    post: str = "post",
) -> MmvBuilder:
    """A websrv worker's file: counter ``requests`` over instances get and ``post``,
    instant ``busy`` (singular)."""
    b = MmvBuilder(cluster=0, generation=generation)
    b.indoms.append(Indom(1, [Instance(0, "get"), Instance(1, post)]))
    b.metrics.append(Metric("requests", 1, layout.TYPE_U64, layout.SEM_COUNTER, units, indom=1))
    b.metrics.append(Metric("busy", 2, busy_type, layout.SEM_INSTANT))
    b.values += [Value("requests", 0, requests[0]), Value("requests", 1, requests[1])]
    b.values.append(Value("busy", None, busy))
    return b


def file_changes(**kw: Any) -> Any:
    """The scanner's ``Changes`` of one scan (``added``, ``removed``, ...)."""
    from pmda_mmv.directory.filestate import Changes

    return Changes(**kw)


class World:
    """One family (``spec``, as ``--family`` takes it) served from files in ``tmp``."""

    def __init__(self, tmp: Path, spec: str, registry: Registry | None = None) -> None:
        self.tmp = tmp
        self.log: list[str] = []
        self.registry = registry or Registry()
        self.cat = Catalogue(log=self.log.append, registry=self.registry)
        self.families = Families(self.cat, [parse_family(spec)], self.log.append)
        self.model = Serving(self.cat, self.log.append, self.families)

    def add(self, name: str, b: MmvBuilder, uid: int = 0) -> None:
        path = self.tmp / name
        b.write(path)
        os.chown(path, uid, uid)
        entry = self.cat.add(MmvFile.open(str(path)))
        assert entry is not None
        self.apply(file_changes(added=[entry]))

    def apply(self, changes: Any) -> None:
        """What the glue does (pmda.MmvPMDA._apply), without its python3-pcp tables."""
        plan = self.model.apply(changes)
        for cluster, item in plan.pmids:
            self.model.unserve_metric(cluster, item)
        for cluster, item in plan.pmids:
            self.model.serve_metric(cluster, item)

    def remove(self, name: str) -> None:
        entry = self.cat.remove(name)
        assert entry is not None
        self.apply(file_changes(removed=[entry]))

    def fetch(self, metric: str) -> dict[int, Any]:
        cluster, item = self.cat.leaf_pmid[f"mmv.websrv.{metric}"]
        self.model.prefetch()
        self.model.snapshot_cluster(cluster, lambda e, err: None)
        fetch = self.model.fetcher()
        keys = [0, 1] if metric == "requests" else [PM_IN_NULL]
        got = {k: fetch(cluster, item, k) for k in keys}
        return {k: v[0] for k, v in got.items() if v is not None}
