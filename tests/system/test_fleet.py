"""Fleet scale: our metrics travel pmcd -> pmlogger -> pmproxy -> key server ->
pmseries intact.

One pipeline per module, all real and private (loopback, free ports, own directories):

* libpcp_mmv (ctypes, :mod:`tests.support.fleet.writer`) writes an MMV v3 file with labels at every
  level (cluster, item, indom, instances; one optional) into a private ``mmv`` directory;
* a private pmcd runs pmda-mmv on it, and a second private pmcd runs PCP's C pmdammv (the
  reference) on the same file;
* pmlogger records ``mmv`` from each pmcd at 1 s intervals for a few seconds;
* pmproxy (``[redis]`` pointing at a private redis-server, ``[discover]`` watching its own
  PCP_ARCHIVE_DIR) log-tails our live archive into the key server, as on a central host;
* ``pmseries --load`` also loads each finished archive into a key server of its own, so
  that our agent's series can be compared with the C agent's loaded the same way;
* ``pmseries`` (and pmproxy's REST API, which grafana-pcp uses) queries the key servers.

Every label level is in the archive.  What PCP 6.0.3 itself drops on the way to the series
is pinned down by strict xfails: the series labels of a metric with an instance domain keep
no cluster or item label, and no instance label (PCP issue #2418).  The C agent's series are
the same as ours (same series ids, labels and values), so the loss is not the agent's.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import json
import re
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest

from pmda_mmv.agent import pcpcompat
from pmda_mmv.mmvfile import layout
from tests.support.fleet.services import KeyServer, Pmproxy, Pmseries, Sample, record, require_fleet
from tests.support.fleet.writer import FleetFile, write_fleet
from tests.support.pmcd import (
    MMV_DOMAIN,
    AgentSpec,
    PrivatePmcd,
    c_agent,
    make_dir,
    our_agent,
    require_pcp,
)

pytestmark = pytest.mark.pmcd

SECONDS = 5  # pmlogger run time (-T); samples every second
T = TypeVar("T")


@dataclass
class Fleet:
    """The pipeline: the file written (``file``), the live pmcd with our agent (``pmcd``),
    ``pmproxy`` and three key servers' clients: ``live`` (filled by pmproxy's discovery of
    our growing archive), ``ours`` and ``reference`` (``pmseries --load`` of our archive and
    of the C agent's)."""

    file: FleetFile
    pmcd: PrivatePmcd
    pmproxy: Pmproxy
    live: Pmseries
    ours: Pmseries
    reference: Pmseries
    archive: Path
    ref_archive: Path


@pytest.fixture(scope="module")
def fleet(private_base: Path) -> Iterator[Fleet]:
    require_pcp()
    require_fleet()
    base = make_dir(Path(tempfile.mkdtemp(prefix="fleet-", dir=private_base)))
    mmv_dir = make_dir(base / "tmp" / "mmv")
    ff = write_fleet(mmv_dir / "fleet")
    with contextlib.ExitStack() as stack:
        keys = [stack.enter_context(KeyServer(base / f"keys-{n}")) for n in ("live", "o", "c")]
        pmproxy = stack.enter_context(Pmproxy(base / "pmproxy", keys[0].port))
        ours = stack.enter_context(PrivatePmcd(base / "pmcd", [our_agent(mmv_dir)]))
        ref = stack.enter_context(PrivatePmcd(base / "pmcd-c", [reference_agent(mmv_dir)]))
        archive = pmproxy.archive_dir / "fleet-host" / "fleet"
        ref_archive = base / "reference" / "fleet"
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            jobs = [
                pool.submit(record, ours.host, "mmv", archive, SECONDS, ours.tmp_dir),
                pool.submit(record, ref.host, "mmv", ref_archive, SECONDS, ref.tmp_dir),
            ]
            for job in jobs:
                job.result()
        live, loaded, reference = (Pmseries(k.port) for k in keys)
        f = Fleet(ff, ours, pmproxy, live, loaded, reference, archive, ref_archive)
        f.ours.load(archive)
        f.reference.load(ref_archive)
        wait_ingested(f)
        yield f


def reference_agent(mmv_dir: Path) -> AgentSpec:
    """PCP's C pmdammv on ``mmv_dir`` run under the program name ``mmv``: the C agent's
    domain label is its program name less a leading "pmda" (``pmdammv-reference`` would
    label every series "mmv-reference" and change its id), and a process named ``mmv`` is
    still out of reach of pmdaproc.sh, which stops every process named ``pmdammv``."""
    return dataclasses.replace(c_agent(mmv_dir.parent), argv0="mmv")


def samples(archive: Path, metric: str) -> int:
    """How many values of singular ``metric`` the archive holds (pmdumplog)."""
    out = subprocess.run(["pmdumplog", archive, metric], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return len(re.findall(rf"\({re.escape(metric)}\): value", out.stdout))


def sample_times(archive: Path, metric: str) -> list[str]:
    """The times ``pmdumplog`` prints for the values of singular ``metric``."""
    out = subprocess.run(["pmdumplog", archive, metric], capture_output=True, text=True)
    value = rf"^(\S+) .*\n\s+\S+ \({re.escape(metric)}\): value"
    return re.findall(value, out.stdout, re.M)


def wait_loaded(series: Pmseries, name: str, want: int, deadline: float) -> list[Sample]:
    """The samples of ``name`` in a key server filled by ``pmseries --load``, newest first,
    once it holds ``want`` of them or at ``deadline``: the key server may still be storing
    the last ones when ``pmseries --load`` has exited (seen once in CI: 4 of 5)."""
    while True:
        loaded = [s for v in series.values(f"{name}[count:100]").values() for s in v]
        if len(loaded) >= want or time.monotonic() >= deadline:
            return loaded
        time.sleep(0.3)


def wait_ingested(f: Fleet, timeout: float = 30) -> None:
    """Wait until pmproxy, tailing the archive, has reached its last sample: the newest
    value in the live key server is the newest of the full ``pmseries --load`` (pmproxy
    starts reading a newly discovered archive at its end, so it may miss the first
    samples, never the last)."""
    name = f.file.pcp_name("latency")
    want = samples(f.archive, name)
    deadline = time.monotonic() + timeout
    loaded = wait_loaded(f.ours, name, want, deadline)
    assert want >= 2 and len(loaded) == want, (
        f"{name}: archive {want} ({sample_times(f.archive, name)}), loaded {loaded}"
    )
    live: list[Sample] = []
    while time.monotonic() < deadline:
        live = [s for v in f.live.values(f"{name}[count:100]").values() for s in v]
        if live and live[0].time == loaded[0].time:
            return
        time.sleep(0.3)
    raise AssertionError(
        f"pmproxy ingested {live}, the archive ends at {loaded[0]}\n{f.pmproxy.logs()}"
    )


# -- helpers ----------------------------------------------------------------------------------


def expected(ff: FleetFile, metric: str, value: str) -> Any:
    """A pmseries value text as the Python value the writer set (strings unquoted)."""
    return value[1:-1] if ff.metrics[metric].type == layout.TYPE_STRING else float(value)


def written(ff: FleetFile, metric: str, inst: str | None) -> Any:
    v = ff.metrics[metric].values[inst]
    return v if isinstance(v, str) else float(v)


def only(items: list[T], what: str) -> T:
    assert len(items) == 1, f"{what}: {items}"
    return items[0]


def desc_lines(pmcd: PrivatePmcd, name: str) -> list[str]:
    """The 'Data Type' and 'Semantics' lines ``pminfo -d`` prints for ``name`` (the live
    pmcd), which pmseries prints the same way (libpcp's pmTypeStr, pmSemStr, pmUnitsStr)."""
    out = pmcd.run("pminfo", "-d", name)
    assert out.returncode == 0, out.stderr
    return [ln.strip() for ln in out.stdout.splitlines() if ln.strip().startswith(("Data", "Sem"))]


LABEL_SET = re.compile(r"^\s+(Domain|Cluster|PMID|InDom) (\S+) labels \(\d+ bytes\): (\{.*\})$")


def archive_labels(archive: Path) -> dict[tuple[str, str], dict[str, Any]]:
    """The label sets ``pmdumplog -e`` finds in an archive: (kind, identifier) -> labels,
    kind Domain, Cluster, PMID or InDom (identifier ``70.S[internal]`` for instances)."""
    out = subprocess.run(["pmdumplog", "-e", archive], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    found = {}
    for line in out.stdout.splitlines():
        if m := LABEL_SET.match(line):
            found[(m.group(1), m.group(2))] = json.loads(m.group(3))
    return found


# -- the archive ------------------------------------------------------------------------------


def test_archive_holds_labels_of_every_level(fleet: Fleet) -> None:
    ff = fleet.file
    labels = archive_labels(fleet.archive)
    indom = only(
        re.findall(
            r"InDom: (\d+\.\d+)", fleet.pmcd.run("pminfo", "-d", ff.pcp_name("requests")).stdout
        ),
        "indom of requests",
    )
    assert labels[("Domain", str(MMV_DOMAIN))] == {"agent": "mmv"}
    assert labels[("Cluster", f"{MMV_DOMAIN}.{ff.cluster}")] == ff.cluster_labels
    for metric, want in ff.item_labels.items():
        item = ff.metrics[metric].item
        assert labels[("PMID", f"{MMV_DOMAIN}.{ff.cluster}.{item}")] == want
    assert labels[("InDom", indom)] == ff.indom_labels
    for internal, external in ff.instances:
        assert labels.get(("InDom", f"{indom}[{internal}]"), {}) == ff.instance_labels.get(
            external, {}
        )
    assert labels == archive_labels(fleet.ref_archive), "the C agent's archive differs"


# -- pmseries on the key server pmproxy fills -------------------------------------------------


@pytest.mark.parametrize("metric", ["requests", "latency", "version"])
def test_found_by_name_with_descriptor(fleet: Fleet, metric: str) -> None:
    ff, name = fleet.file, fleet.file.pcp_name(metric)
    series = fleet.live.describe(only(fleet.live.query(name), name))
    assert series.names == [name]
    assert series.pmid == f"{MMV_DOMAIN}.{ff.cluster}.{ff.metrics[metric].item}"
    assert series.desc == desc_lines(fleet.pmcd, name)
    want = {ext for _, ext in ff.instances} if ff.metrics[metric].indom is not None else set()
    assert set(series.instances) == want


@pytest.mark.parametrize("metric", ["requests", "latency", "version"])
def test_values_and_instance_names(fleet: Fleet, metric: str) -> None:
    ff, name = fleet.file, fleet.file.pcp_name(metric)
    series = fleet.live.describe(only(fleet.live.query(name), name))
    inst_name = {sid: ext for ext, sid in series.instances.items()}
    got = fleet.live.values(f"{name}[count:100]")[series.sid]
    assert got, f"no values of {name}"
    for s in got:
        inst = inst_name[s.instance] if s.instance else None
        assert expected(ff, metric, s.value) == written(ff, metric, inst), s
    newest = {inst_name[s.instance] if s.instance else None for s in got if s.time == got[0].time}
    assert newest == set(ff.metrics[metric].values)


def test_found_by_label_of_each_level(fleet: Fleet) -> None:
    ff, live = fleet.file, fleet.live
    sid = {m: only(live.query(ff.pcp_name(m)), m) for m in ff.metrics}
    singular = {sid[m] for m, spec in ff.metrics.items() if spec.indom is None}
    assert set(live.query('{agent:"mmv"}')) >= set(sid.values())  # domain label
    assert set(live.query(query(ff.cluster_labels))) >= singular  # cluster label
    for metric, labels in ff.item_labels.items():
        if ff.metrics[metric].indom is None:
            assert live.query(query(labels)) == [sid[metric]]  # item label
    assert live.query(query(ff.indom_labels)) == [sid["requests"]]  # indom label
    assert live.query(f"{ff.pcp_name('latency')}{query(ff.item_labels['latency'])}") == [
        sid["latency"]
    ]
    names = set(live.run("-l").stdout.split())
    assert names >= {"agent", *ff.cluster_labels, *ff.item_labels["latency"], *ff.indom_labels}


def query(labels: dict[str, Any]) -> str:
    """A pmseries label query ``{name:value,...}`` for these labels (values as JSON)."""
    return "{" + ",".join(f"{k}:{json.dumps(v)}" for k, v in labels.items()) + "}"


@pytest.mark.xfail(
    strict=True,
    reason="PCP 6.0.3, 6.3.8 and 7.2.2: libpcp_web keeps only context, domain and indom labels "
    "in the series "
    "labels of a metric with an instance domain: the cluster and item labels are lost "
    "(the C agent's series are identical, see test_same_series_as_the_c_agent)",
)
def test_cluster_and_item_labels_of_a_metric_with_instances(fleet: Fleet) -> None:
    ff = fleet.file
    series = fleet.live.describe(only(fleet.live.query(ff.pcp_name("requests")), "requests"))
    want = {**ff.cluster_labels, **ff.item_labels["requests"]}
    assert all(labels.items() >= want.items() for labels in series.labels.values())


@pytest.mark.xfail(
    pcpcompat.version() < (7, 2, 0),
    strict=True,
    reason="PCP issue #2418, PCP < 7.2.0 (seen on 6.0.3 and 6.3.8; fixed in 7.2.2, 7.0 to 7.1 "
    "not tried): instance labels do not reach pmseries or the REST API (they are in the "
    "archive: test_archive_holds_labels_of_every_level)",
)
def test_instance_labels_reach_series(fleet: Fleet) -> None:
    ff = fleet.file
    series = fleet.live.describe(only(fleet.live.query(ff.pcp_name("requests")), "requests"))
    for inst, want in ff.instance_labels.items():
        assert series.labels[inst].items() >= want.items()


# -- the REST API through pmproxy (what grafana-pcp uses) -------------------------------------


def test_rest_api_through_pmproxy(fleet: Fleet) -> None:
    ff, rest, name = fleet.file, fleet.pmproxy.rest, fleet.file.pcp_name("requests")
    sid = only(rest("series/query", expr=name), name)
    assert [sid] == fleet.live.query(name)
    assert rest("series/query", expr=query(ff.indom_labels)) == [sid]
    names = {i["instance"]: i["name"] for i in rest("series/instances", series=sid)}
    assert set(names.values()) == {ext for _, ext in ff.instances}
    latest = rest("series/query", expr=f"{name}[samples:1]")
    assert {names[v["instance"]]: float(v["value"]) for v in latest} == {
        k: float(v) for k, v in ff.metrics["requests"].values.items()
    }
    desc = only(rest("series/descs", series=sid), "descs")
    series = fleet.live.describe(sid)
    assert desc["pmid"] == series.pmid
    assert f"Semantics: {desc['semantics']}  Units: {desc['units']}" in series.desc
    labels = {v["series"]: v["labels"] for v in rest("series/labels", series=",".join(names))}
    assert all(lb.items() >= ff.indom_labels.items() for lb in labels.values()), labels


# -- parity with PCP's C pmdammv at fleet scale -----------------------------------------------


@pytest.mark.parametrize("metric", ["requests", "latency", "version"])
def test_same_series_as_the_c_agent(fleet: Fleet, metric: str) -> None:
    """Both archives loaded the same way (``pmseries --load``) give the same series ids
    (SHA-1 of name, descriptor and labels), metadata and values."""
    name = fleet.file.pcp_name(metric)
    ours, ref = fleet.ours.query(name), fleet.reference.query(name)
    assert ours == ref and len(ours) == 1
    assert fleet.ours.describe(ours[0]) == fleet.reference.describe(ref[0])

    def values(client: Pmseries) -> set[tuple[str, str | None]]:
        return {(s.value, s.instance) for s in client.values(f"{name}[count:100]")[ours[0]]}

    assert values(fleet.ours) == values(fleet.reference)
