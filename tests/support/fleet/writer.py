"""An MMV v3 file with labels at every level, written by libpcp_mmv's registry API (ctypes).

:func:`write_fleet` asks libpcp_mmv for one indom with three instances, a counter over it,
a singular gauge and a singular string, and one label at each mmv(5) label level (cluster,
item, indom, instance; one of them optional).  It returns a :class:`FleetFile` that says
what was asked for, so that tests compare what arrives at the far end (pmlogger archive,
Redis, pmseries) with the writer's input instead of with a copy of an expected output.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pmda_mmv.mmvfile import layout
from tests.support.mmvbuild import COUNT, MSEC
from tests.support.writers.libpcp_mmv import LABEL_BOOLEAN, LABEL_NUMBER, LABEL_STRING, Registry

CLUSTER = 321
SERIAL = 7


@dataclass(frozen=True)
class FleetMetric:
    """One metric as given to ``mmv_stats_add_metric``; ``values``: external instance name
    (None for a singular metric) -> value."""

    name: str
    item: int
    type: int
    semantics: int
    units: int
    indom: int | None
    shorthelp: str
    values: dict[str | None, Any]


@dataclass
class FleetFile:
    """What :func:`write_fleet` wrote: file ``path`` (MMV name ``path.name``), ``cluster``,
    ``instances`` [(internal, external)] of indom ``serial``, ``metrics`` by MMV name, and
    the labels by level, each a dict as the payload JSON decodes; ``instance_labels`` maps
    external instance name -> labels, ``optional`` names the labels written with
    MMV_LABEL_OPTIONAL.  ``handle`` keeps libpcp_mmv's mapping alive."""

    path: Path
    cluster: int
    serial: int
    instances: list[tuple[int, str]]
    metrics: dict[str, FleetMetric]
    cluster_labels: dict[str, Any]
    item_labels: dict[str, dict[str, Any]]
    indom_labels: dict[str, Any]
    instance_labels: dict[str, dict[str, Any]]
    optional: set[str] = field(default_factory=set)
    handle: Any = None

    def pcp_name(self, metric: str, prefix: str = "mmv") -> str:
        """The PCP name the mmv agent serves ``metric`` under: ``<prefix>.<file>.<metric>``."""
        return f"{prefix}.{self.path.name}.{metric}"


def write_fleet(path: Path) -> FleetFile:
    """Write ``path`` with libpcp_mmv (``mmv_stats_registry`` ... ``mmv_stats_start``) and
    set its values; raises MmvError (a RuntimeError) when the library refuses a step,
    OSError when libpcp_mmv cannot be loaded."""
    instances = [(1, "alpha"), (2, "beta"), (3, "gamma")]
    metrics = {
        m.name: m
        for m in (
            FleetMetric(
                "requests", 1, layout.TYPE_U64, layout.SEM_COUNTER, COUNT, SERIAL,
                "Requests served per backend", {"alpha": 100, "beta": 250, "gamma": 4000},
            ),
            FleetMetric(
                "latency", 2, layout.TYPE_DOUBLE, layout.SEM_INSTANT, MSEC, None,
                "Mean request latency", {None: 2.5},
            ),
            FleetMetric(
                "version", 3, layout.TYPE_STRING, layout.SEM_DISCRETE, 0, None,
                "Service version", {None: "1.2.3"},
            ),
        )
    }  # fmt: skip
    ff = FleetFile(
        path=path,
        cluster=CLUSTER,
        serial=SERIAL,
        instances=instances,
        metrics=metrics,
        cluster_labels={"service": "fleet"},
        item_labels={"requests": {"kind": "rpc"}, "latency": {"tier": "gold"}},
        indom_labels={"pool": "east"},
        instance_labels={"beta": {"role": "leader"}, "gamma": {"canary": True}},
        optional={"canary"},
    )
    r = Registry(path, CLUSTER).indom(SERIAL, instances, "backends", "One instance per backend")
    for m in metrics.values():
        r.metric(m.name, m.item, m.type, m.semantics, m.units, m.indom, m.shorthelp,
                 m.shorthelp + ".")  # fmt: skip
    _add_labels(r, ff)
    r.start()
    for m in metrics.values():
        for inst, value in m.values.items():
            r.set(m.name, inst, value)
    ff.handle = r
    return ff


def _label_args(labels: dict[str, Any]) -> list[tuple[str, str, int]]:
    """(name, JSON value, MMV_*_TYPE) for each label: libpcp_mmv takes the value as JSON."""
    out = []
    for name, value in labels.items():
        kind = {str: LABEL_STRING, bool: LABEL_BOOLEAN}.get(type(value), LABEL_NUMBER)
        out.append((name, json.dumps(value), kind))
    return out


def _add_labels(r: Registry, ff: FleetFile) -> None:
    for name, value, kind in _label_args(ff.cluster_labels):
        r.registry_label(name, value, kind, name in ff.optional)
    for metric, labels in ff.item_labels.items():
        for name, value, kind in _label_args(labels):
            r.metric_label(ff.metrics[metric].item, name, value, kind, name in ff.optional)
    for name, value, kind in _label_args(ff.indom_labels):
        r.indom_label(ff.serial, name, value, kind, name in ff.optional)
    internal = {ext: i for i, ext in ff.instances}
    for inst, labels in ff.instance_labels.items():
        for name, value, kind in _label_args(labels):
            r.instance_label(ff.serial, internal[inst], name, value, kind, name in ff.optional)
