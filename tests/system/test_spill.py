"""Every metric a writer defines is served: spill clusters.

A metric the C agent drops for its item (past 1023, or the item of an earlier metric of
its file) is served under a further cluster of its file, at a PMID remembered in the
identity registry (docs/spill.md).  Real writers (libpcp_mmv through ctypes: the registry
API, ``mmv_stats_init`` and ``mmv_stats2_init``; python3-pcp's ``pcp.mmv``), files laid
out as Speed (Go) and Hornet (Rust) write them (the test byte builder), a real private
pmcd, pminfo and pmlogger.  The catalogue's rules without pmcd come first."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pmda_mmv.mmvfile import layout, limits
from pmda_mmv.mmvfile.reader import MmvFile
from pmda_mmv.namespace.catalogue import Catalogue
from pmda_mmv.namespace.registry import Registry
from pmda_mmv.namespace.served import FileEntry
from pmda_mmv.namespace.spill import SPILL_CAP, fnv1a32
from tests.support import mmvbuild as mb
from tests.support.pmcd import REGISTRY_NAME, PrivatePmcd, make_dir, our_agent, registry_dir
from tests.support.writers.libpcp_mmv import (
    LABEL_NUMBER,
    LABEL_STRING,
    LegacyMetric,
    Mapping,
    legacy_init,
)
from tests.support.writers.libpcp_mmv import Registry as Writer

PYTHON = "/usr/bin/python3"  # python3-pcp's interpreter
HARDENING = Path(__file__).parents[1] / "data" / "hardening"


# -- writers ----------------------------------------------------------------------------------


def value_of(k: int, base: int) -> int:
    return base + 10 * k


def write_registry(path: Path, n: int, base: int = 0, cluster: int = 0) -> Writer:
    """libpcp_mmv's registry API: ``n`` counters ``q<k>.count`` at items k+1 (so those
    from item 1024 on spill), help ``queue <k>``, a cluster label and item labels on some
    (version 3: the library picks it for the labels)."""
    w = Writer(path, cluster=cluster)
    w.registry_label("app", '"big"', LABEL_STRING)
    for k in range(n):
        w.metric(f"q{k}.count", k + 1, layout.TYPE_U64, layout.SEM_COUNTER, short=f"queue {k}")
    for k in labelled(n):
        w.metric_label(k + 1, "queue", str(k), LABEL_NUMBER)
    w.start()
    for k in range(n):
        w.set(f"q{k}.count", None, value_of(k, base))
    return w


def labelled(n: int) -> list[int]:
    """The metrics given an item label: primary ones and spilled ones."""
    return [k for k in (0, 5, 1022, 1023, 1499, 3999) if k < n]


def write_legacy(path: Path, n: int, symbol: str, base: int = 0) -> Mapping:
    """``mmv_stats_init`` (version 1) or ``mmv_stats2_init`` with one name of 64 bytes or
    more (version 2, names in the string table)."""
    metrics = [
        LegacyMetric(f"q{k}.count", k + 1, layout.TYPE_U64, layout.SEM_COUNTER, short=f"queue {k}")
        for k in range(n)
    ]
    if symbol == "mmv_stats2_init":
        metrics[-1] = LegacyMetric("l" * 70, n, layout.TYPE_U64, layout.SEM_COUNTER, short="long")
    m = legacy_init(symbol, path, 0, 0, metrics, [])
    for k, lm in enumerate(metrics):
        m.set(lm.name, None, value_of(k, base))
    return m


PCP_MMV_WRITER = """
import sys
from pcp import mmv, pmapi
path, n, base = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
w = mmv.MemoryMappedValues(path, flags=0, cluster=0)
metrics = []
for k in range(n):
    m = mmv.mmv_metric(f"q{k}.count", k + 1, 4, 1, pmapi.pmUnits(), 0xFFFFFFFF)
    m.semantics, m.shorttext, m.helptext = 1, f"queue {k}".encode(), f"queue {k}".encode()
    metrics.append(m)
w.add_metrics(metrics)
w.start()
for k in range(n):
    w.lookup_set(f"q{k}.count", "", base + 10 * k)
print("ready", flush=True)
sys.stdin.read()
"""


def fnv_collisions(count: int) -> list[tuple[str, str]]:
    """Pairs of names ``m<k>`` whose items, as Speed and Hornet choose them
    (``fnv32a(name) & 1023``), are the same: found by search."""
    seen: dict[int, str] = {}
    pairs = []
    k = 0
    while len(pairs) < count:
        name = f"m{k}"
        item = fnv1a32(name.encode()) & 1023
        if item in seen:
            pairs.append((seen.pop(item), name))
        else:
            seen[item] = name
        k += 1
    return pairs


def hashed_file(version: int, pairs: list[tuple[str, str]], base: int) -> mb.MmvBuilder:
    """A file as Speed (v2: names in the string table) or Hornet (v3, with labels) lays
    it out: items from ``fnv32a(name) & 1023``, so each pair shares an item."""
    b = mb.MmvBuilder(version=version, cluster=321)
    for k, name in enumerate(n for pair in pairs for n in pair):
        item = fnv1a32(name.encode()) & 1023
        b.metrics.append(mb.Metric(name, item, layout.TYPE_U64, shorthelp=f"help {name}"))
        b.values.append(mb.Value(name, None, base + k))
    if version == 3:
        b.labels.append(mb.Label(layout.LABEL_CLUSTER, 321, '{"lang":"rust"}'))
        first = pairs[0][0]
        b.labels.append(mb.Label(layout.LABEL_ITEM, fnv1a32(first.encode()) & 1023, '{"x":1}'))
    return b


# -- pmcd helpers -----------------------------------------------------------------------------


def pmids(pmcd: PrivatePmcd, subtree: str) -> dict[str, str]:
    out = pmcd.run("pminfo", "-m", subtree)
    return dict(re.findall(r"^(\S+) PMID: (\S+)$", out.stdout, re.M))


def fetched(pmcd: PrivatePmcd, subtree: str) -> dict[str, tuple[str, str]]:
    """{name: (one-line help, value)} of every metric below ``subtree``."""
    out = pmcd.run("pminfo", "-tf", subtree).stdout
    got = {}
    for block in out.strip().split("\n\n"):
        head = re.match(r"(\S+) \[(.*)\]", block)
        value = re.search(r"^\s+value (.*)$", block, re.M)
        if head and value:
            got[head.group(1)] = (head.group(2), value.group(1))
    return got


def labels_of(pmcd: PrivatePmcd, *names: str) -> dict[str, dict[str, Any]]:
    out = pmcd.run("pminfo", "-l", *names).stdout
    got = {}
    for block in out.strip().split("\n\n"):
        m = re.match(r"(\S+)\n\s+labels (\{.*\})", block)
        if m:
            got[m.group(1)] = json.loads(m.group(2))
    return got


def wait_served(pmcd: PrivatePmcd, subtree: str, n: int, timeout: float = 60) -> dict[str, str]:
    deadline = time.monotonic() + timeout
    while True:
        got = pmids(pmcd, subtree)
        if len(got) >= n:
            return got
        assert time.monotonic() < deadline, (len(got), pmcd.agent_log()[-3000:])
        time.sleep(0.3)


def check_json(mmv_dir: Path, *paths: Path) -> list[dict[str, Any]]:
    registry = registry_dir(mmv_dir) / REGISTRY_NAME
    done = subprocess.run(
        [sys.executable, "-P", "-m", "pmda_mmv", "check", "--json", "--registry", str(registry)]
        + [str(p) for p in paths],
        capture_output=True,
        text=True,
    )
    assert done.returncode in (0, 1), done.stderr
    result: list[dict[str, Any]] = json.loads(done.stdout)
    return result


def assert_whole(pmcd: PrivatePmcd, file: str, n: int, base: int, names: list[str]) -> None:
    """Every metric of ``file`` served, each with its own PMID, value and help."""
    got = fetched(pmcd, f"mmv.{file}")
    ids = pmids(pmcd, f"mmv.{file}")
    assert len(got) == len(ids) == n, (len(got), len(ids))
    assert len(set(ids.values())) == n
    for k, name in enumerate(names):
        help_, value = got[f"mmv.{file}.{name}"]
        if name.startswith("q"):
            assert (help_, value) == (f"queue {k}", str(value_of(k, base))), name


# -- the catalogue's rules, without pmcd ------------------------------------------------------


def build(path: Path, names: list[tuple[str, int]], cluster: int = 0) -> Path:
    b = mb.MmvBuilder(version=2, cluster=cluster)
    for name, item in names:
        b.metrics.append(mb.Metric(name, item))
        b.values.append(mb.Value(name, None, item))
    b.build().write(path)
    return path


def served(c: Catalogue, path: Path) -> dict[str, tuple[int, int]]:
    with MmvFile.open(str(path), name=path.name) as mf:
        entry = c.add(mf)
        assert entry is not None
        return {sm.metric.name: (sm.cluster, sm.item) for sm in entry.metrics}


def test_primary_metrics_keep_cs_pmids_the_rest_spill(tmp_path: Path) -> None:
    p = build(tmp_path / "app", [("a", 5), ("b", 5), ("c", 1023), ("d", 1024), ("e", 2**32 - 1)])
    got = served(Catalogue(), p)
    assert got["a"] == (1, 5) and got["c"] == (1, 1023)  # C's PMIDs: (cluster, item)
    spill = {got[n][0] for n in "bde"}
    assert len(spill) == 1 and spill != {1}  # one spill cluster of the file
    for n in "bde":  # placed at their name's hash (probing from there)
        assert got[n][1] == fnv1a32(n.encode()) & 1023


def test_spill_pmids_survive_restarts_in_any_order_and_are_never_reused(tmp_path: Path) -> None:
    a = build(tmp_path / "a", [(f"x{k}", k + 1) for k in range(1500)])
    b = build(tmp_path / "b", [(f"y{k}", k + 1) for k in range(1500)])
    reg = tmp_path / "reg.json"
    r1 = Registry(str(reg))
    c1 = Catalogue(registry=r1)
    first = {**served(c1, a), **served(c1, b)}
    assert len(set(first.values())) == 3000
    r1.save()
    r2 = Registry(str(reg))
    r2.load()
    c2 = Catalogue(registry=r2)
    assert {**served(c2, b), **served(c2, a)} == first  # the other order, after a restart
    # a metric gone from the file keeps its number: a new name never gets it
    gone = first["x1499"]
    a2 = build(tmp_path / "a", [(f"x{k}", k + 1) for k in range(1499)] + [("new", 3000)])
    again = served(c2, a2)
    assert again["new"] not in set(first.values()) and gone not in set(again.values())
    assert {n: v for n, v in again.items() if n != "new"} == {
        n: v for n, v in first.items() if n.startswith("x") and n != "x1499"
    }


def test_spill_clusters_are_another_files_never(tmp_path: Path) -> None:
    """A file asking for another file's spill cluster is moved; cluster-0 files never get
    one (and the spill cluster avoids clusters other files ask for)."""
    big = build(tmp_path / "big", [(f"x{k}", k + 1) for k in range(1100)], cluster=7)
    c = Catalogue()
    got = served(c, big)
    spill = got["x1099"][0]
    assert spill != 7
    other = build(tmp_path / "other", [("z", 1)], cluster=spill)
    with MmvFile.open(str(other), name="other") as mf:
        entry = c.add(mf)
        assert entry is not None and entry.cluster not in (spill, 7)
        assert "served to big" in entry.identity


def test_processes_of_one_application_still_share_their_cluster(tmp_path: Path) -> None:
    """NOPREFIX files of one owner and cluster (PCP QA 648) share it with spilled metrics
    too: the first file serves the spilled name, the later one's is refused (a problem)."""
    builders = {}
    for name in ("p1", "p2"):
        b = builders[name] = mb.MmvBuilder(version=2, cluster=40, flags=layout.FLAG_NOPREFIX)
        b.metrics += [mb.Metric("app.a", 1), mb.Metric("app.big", 2000)]
        b.values += [mb.Value("app.a", None, 1), mb.Value("app.big", None, 2)]
    p1, p2 = _catalogued(tmp_path, builders)
    assert p1.cluster == p2.cluster == 40
    assert [sm.name for sm in p1.metrics] == ["mmv.app.a", "mmv.app.big"]
    assert [sm.name for sm in p2.metrics] == ["mmv.app.a"]
    assert len(p2.problems) == 1 and "mmv.app.big" in str(p2.problems[0])


@pytest.mark.parametrize(
    "items",
    [(1, 2), (2000, 3000), (3, 5000), (5000, 3), (5, 5)],
    ids=["primary", "both-spilled", "then-spilled", "spilled-first", "same-item"],
)
def test_a_name_defined_twice_is_served_once_the_first_entry(
    tmp_path: Path, items: tuple[int, int]
) -> None:
    """One rule for every metric of a file, spilled or not: a later entry with the name of an
    earlier one is a problem naming both offsets; the first is served, at its own PMID, and
    no spill PMID is kept for a name served at its own item."""
    path = build(tmp_path / "app", [("dup.m", items[0]), ("ok", 7), ("dup.m", items[1])])
    c = Catalogue()
    with MmvFile.open(str(path), name="app") as mf:
        first, _, later = (m.offset for m in mf.metrics)
        entry = c.add(mf)
        assert entry is not None
        assert [(sm.name, sm.metric.offset) for sm in entry.metrics] == [
            ("mmv.app.dup.m", first),
            ("mmv.app.ok", mf.metrics[1].offset),
        ]
        assert len({(sm.cluster, sm.item) for sm in entry.metrics}) == 2
        why = f"mmv.app.dup.m is already the name of the metric at offset {first}"
        assert [str(p) for p in entry.problems] == [
            f"{path}: metrics at offset {later}: {why}, metric not served"
        ]
        spilled = items[0] > limits.MAX_ITEM
        assert (entry.metrics[0].cluster != entry.cluster) == spilled
        assert list(entry.spills) == (["dup.m"] if spilled else [])


def test_a_name_defined_twice_does_not_keep_writers_of_one_application_apart(
    tmp_path: Path,
) -> None:
    """NOPREFIX files of one owner and cluster (PCP QA 648) still share it when the later
    one defines a shared name twice: its later entry is refused, not counted against it."""
    builders = {}
    for name, items in (("p1", (1,)), ("p2", (1, 2))):
        b = builders[name] = mb.MmvBuilder(version=2, cluster=40, flags=layout.FLAG_NOPREFIX)
        b.metrics += [mb.Metric("app.a", item) for item in items]
        b.values.append(mb.Value("app.a", None, 1))
    p1, p2 = _catalogued(tmp_path, builders)
    assert p1.cluster == p2.cluster == 40
    assert [(sm.name, sm.cluster, sm.item) for sm in p2.metrics] == [("mmv.app.a", 40, 1)]
    first, later = (sm.offset for sm in p2.mf.metrics)
    assert [(p.offset, f"offset {first}" in p.message) for p in p2.problems] == [(later, True)]


def test_registry_keeps_spills_in_its_file(tmp_path: Path) -> None:
    reg = Registry(str(tmp_path / "r.json"))
    reg.serve(("f", 0), 3, 0, False, {}, spills={"m": (9, 44)})
    reg.save()
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["names"][0]["spills"] == {"m": [9, 44]}
    again = Registry(str(tmp_path / "r.json"))
    again.load()
    rec = again.get(("f", 0))
    assert rec is not None and rec.spills == {"m": (9, 44)}
    assert again.cluster_held(9) and again.holders(9) == [("f", 0)]


def test_spilled_names_remembered_are_bounded(tmp_path: Path) -> None:
    """A writer that renames its metrics at every start does not grow the registry
    without bound: past SPILL_CAP names the oldest departed ones are forgotten."""
    c = Catalogue()
    path = tmp_path / "app"
    for round_ in range(3):
        names = [
            (f"r{round_}m{k}", 2000 + k) for k in range(limits.MAX_ENTRIES[layout.TOC_METRICS])
        ]
        served(c, build(path, names))
    record = c.registry.get(("app", os.getuid()))
    assert record is not None and len(record.spills) == SPILL_CAP


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-P", "-m", "pmda_mmv", *args], capture_output=True, text=True
    )


def test_check_dump_and_debug_list_every_spilled_metric_alike(tmp_path: Path) -> None:
    """One judgement: the same PMID for each spilled metric in check (JSON and text),
    dump and debug (each reading the agent's registry, read only), the file ``ok`` in
    check and dump (for 1,500 metrics check said refused and dump partial)."""
    pairs = fnv_collisions(2)
    hashed_file(2, pairs, base=1).build().write(tmp_path / "client")
    build(tmp_path / "big", [(f"x{k}", k + 1) for k in range(1500)])
    [big, client] = json.loads(cli("check", "--json", str(tmp_path)).stdout)  # sorted
    assert (client["status"], big["status"]) == ("ok", "ok")
    assert client["problems"] == big["problems"] == []
    assert len(big["spills"]) == 1500 - limits.MAX_ITEM and len(client["spills"]) == 2
    expected = {s["name"]: s["pmid"] for s in client["spills"] + big["spills"]}
    for first, second in pairs:
        assert f"metrics[{[n for p in pairs for n in p].index(first)}] {first!r}" in next(
            s["why"] for s in client["spills"] if s["metric"] == second
        )
    text = cli("check", str(tmp_path / "client")).stdout.splitlines()
    assert text[0] == f"{tmp_path / 'client'}: ok"
    shown = dict(re.findall(r"^  spilled: (\S+) PMID (\S+): ", "\n".join(text), re.M))
    assert shown == {k: v for k, v in expected.items() if ".client." in k}
    dump = json.loads(cli("dump", "--json", str(tmp_path / "client"), str(tmp_path / "big")).stdout)
    assert [d["status"] for d in dump] == ["ok", "ok"]
    dumped = {
        f"mmv.{Path(d['file']).name}.{m['name']}": m["pmid"]
        for d in dump
        for m in d["metrics"]
        if m["spill"]
    }
    assert dumped == expected
    debug = cli("debug", "--dir", str(tmp_path), "--once").stdout
    listed = re.findall(r"^(\S+)  PMID (\S+)  .*\n(?:    .*\n){0,2}    Spilled: ", debug, re.M)
    assert dict(listed) == expected


# -- real writers, real pmcd ------------------------------------------------------------------

pmcd_mark = pytest.mark.pmcd


@pytest.fixture
def mmv_dir(private_mmv_dir: Path) -> Path:
    return private_mmv_dir


@pytest.fixture
def handles() -> Iterator[list[Any]]:
    kept: list[Any] = []
    yield kept
    for h in kept:
        if isinstance(h, Writer):
            h.free()
        elif isinstance(h, subprocess.Popen):
            h.kill()
            h.wait(30)


@pmcd_mark
@pytest.mark.parametrize("n", [1024, 1500, 4000])
def test_libpcp_mmv_registry_files_are_served_whole(
    private_pmcd: Any, mmv_dir: Path, handles: list[Any], n: int
) -> None:
    pmcd = private_pmcd(our_agent(mmv_dir, "--status-metrics"))
    handles.append(write_registry(mmv_dir / "big", n, base=7))
    wait_served(pmcd, "mmv.big", n)
    assert_whole(pmcd, "big", n, 7, [f"q{k}.count" for k in range(n)])
    ids = pmids(pmcd, "mmv.big")
    cluster = int(ids["mmv.big.q0.count"].split(".")[1])
    for k in range(n):  # C's PMIDs where C serves them, spill clusters past item 1023
        pmid = ids[f"mmv.big.q{k}.count"]
        if k + 1 <= limits.MAX_ITEM:
            assert pmid == f"70.{cluster}.{k + 1}"
        else:
            assert int(pmid.split(".")[1]) != cluster
    names = [f"mmv.big.q{k}.count" for k in labelled(n)]
    labels = labels_of(pmcd, *names)
    for k, name in zip(labelled(n), names, strict=True):
        assert labels[name]["app"] == "big", labels  # the file's cluster labels
        assert labels[name]["queue"] == k, labels  # its own item's labels
    assert pmcd.fetch("mmv.control.file.metrics") == {"big": str(n)}
    assert pmcd.fetch("mmv.control.metrics") == {None: str(n)}
    assert pmcd.fetch("mmv.control.file.state") == {"big": '"ok"'}
    [verdict] = check_json(mmv_dir, mmv_dir / "big")
    assert verdict["status"] == "ok" and len(verdict["served"]) == n
    spills = {s["name"]: s["pmid"] for s in verdict["spills"]}
    assert len(spills) == max(0, n - limits.MAX_ITEM)
    assert all(ids[name] == pmid for name, pmid in spills.items())  # check agrees


@pmcd_mark
@pytest.mark.parametrize("symbol", ["mmv_stats_init", "mmv_stats2_init"])
def test_legacy_init_files_of_1500_metrics_are_served_whole(
    private_pmcd: Any, mmv_dir: Path, handles: list[Any], symbol: str
) -> None:
    pmcd = private_pmcd(our_agent(mmv_dir))
    handles.append(write_legacy(mmv_dir / "old", 1500, symbol, base=3))
    version = 2 if symbol == "mmv_stats2_init" else 1
    with MmvFile.open(str(mmv_dir / "old")) as mf:
        assert mf.header.version == version
    wait_served(pmcd, "mmv.old", 1500)
    names = [f"q{k}.count" for k in range(1500)]
    if version == 2:
        names[-1] = "l" * 70
    assert_whole(pmcd, "old", 1500, 3, names)


@pmcd_mark
def test_pcp_mmv_file_of_1500_metrics_is_served_whole(
    private_pmcd: Any, mmv_dir: Path, handles: list[Any]
) -> None:
    pmcd = private_pmcd(our_agent(mmv_dir))
    proc = subprocess.Popen(
        [PYTHON, "-c", PCP_MMV_WRITER, str(mmv_dir / "py"), "1500", "11"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    handles.append(proc)
    assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    wait_served(pmcd, "mmv.py", 1500)
    assert_whole(pmcd, "py", 1500, 11, [f"q{k}.count" for k in range(1500)])


@pmcd_mark
def test_two_big_files_keep_their_pmids_across_a_restart_in_the_other_order(
    private_pmcd: Any, private_dir: Path, mmv_dir: Path, handles: list[Any]
) -> None:
    stage = make_dir(private_dir / "stage")
    pmcd = private_pmcd(our_agent(mmv_dir))
    for name, base in (("aaa", 100), ("zzz", 200)):
        handles.append(write_registry(stage / name, 1500, base=base))
    os.rename(stage / "aaa", mmv_dir / "aaa")
    wait_served(pmcd, "mmv.aaa", 1500)
    os.rename(stage / "zzz", mmv_dir / "zzz")
    wait_served(pmcd, "mmv.zzz", 1500)
    first = {**pmids(pmcd, "mmv.aaa"), **pmids(pmcd, "mmv.zzz")}
    assert len(set(first.values())) == 3000
    assert_whole(pmcd, "aaa", 1500, 100, [f"q{k}.count" for k in range(1500)])
    assert_whole(pmcd, "zzz", 1500, 200, [f"q{k}.count" for k in range(1500)])
    # both leave; the agent restarts; they come back the other way round
    os.rename(mmv_dir / "aaa", stage / "aaa")
    os.rename(mmv_dir / "zzz", stage / "zzz")
    pmcd.restart_agent()
    os.rename(stage / "zzz", mmv_dir / "zzz")
    wait_served(pmcd, "mmv.zzz", 1500)
    os.rename(stage / "aaa", mmv_dir / "aaa")
    wait_served(pmcd, "mmv.aaa", 1500)
    assert {**pmids(pmcd, "mmv.aaa"), **pmids(pmcd, "mmv.zzz")} == first
    assert_whole(pmcd, "aaa", 1500, 100, [f"q{k}.count" for k in range(1500)])


@pmcd_mark
@pytest.mark.parametrize("version", [2, 3], ids=["speed-v2", "hornet-v3"])
def test_hashed_items_that_collide_are_both_served(
    private_pmcd: Any, mmv_dir: Path, version: int
) -> None:
    pairs = fnv_collisions(3)
    mb_file = hashed_file(version, pairs, base=50)
    mb_file.build().write(mmv_dir / "client")
    pmcd = private_pmcd(our_agent(mmv_dir))
    names = [n for pair in pairs for n in pair]
    ids = wait_served(pmcd, "mmv.client", len(names))
    got = fetched(pmcd, "mmv.client")
    for k, name in enumerate(names):
        assert got[f"mmv.client.{name}"] == (f"help {name}", str(50 + k))
    for first, second in pairs:  # the first keeps C's PMID, the second spills
        item = fnv1a32(first.encode()) & 1023
        assert ids[f"mmv.client.{first}"] == f"70.321.{item}"
        assert ids[f"mmv.client.{second}"].split(".")[1] != "321"
    if version == 3:
        first, second = pairs[0]
        labels = labels_of(pmcd, f"mmv.client.{first}", f"mmv.client.{second}")
        for name in (first, second):  # cluster labels, and the labels of the on-disk item
            assert labels[f"mmv.client.{name}"]["lang"] == "rust"
            assert labels[f"mmv.client.{name}"]["x"] == 1
    [verdict] = check_json(mmv_dir, mmv_dir / "client")
    assert verdict["status"] == "ok" and not verdict["problems"]
    notes = {s["metric"]: s["why"] for s in verdict["spills"]}
    for first, second in pairs:  # the note names both metrics
        assert second in notes and repr(first) in notes[second]
    pmcd.restart_agent()
    assert wait_served(pmcd, "mmv.client", len(names)) == ids


@pmcd_mark
def test_pmlogger_archive_across_an_agent_restart_keeps_every_metric_apart(
    private_pmcd: Any, private_dir: Path, mmv_dir: Path, handles: list[Any]
) -> None:
    pmcd = private_pmcd(our_agent(mmv_dir, notready=False))
    handles.append(write_registry(mmv_dir / "big", 1500, base=1))
    wait_served(pmcd, "mmv.big", 1500)
    conf = private_dir / "pmlogger.conf"
    conf.write_text("log mandatory on every 1 second {\n    mmv.big\n}\n")
    archive = private_dir / "archive"
    logger = subprocess.Popen(
        [
            *("pmlogger", "-h", pmcd.host, "-c", str(conf), "-t", "1", "-T", "12sec"),
            *("-l", str(private_dir / "pmlogger.log"), str(archive)),
        ],
        env=dict(os.environ, PCP_TMP_DIR=str(pmcd.tmp_dir)),
    )
    try:
        time.sleep(4)
        pmcd.restart_agent()
        wait_served(pmcd, "mmv.big", 1500)
        assert logger.wait(60) == 0, (private_dir / "pmlogger.log").read_text()
    finally:
        if logger.poll() is None:
            logger.kill()
    log = (private_dir / "pmlogger.log").read_text()
    assert "has changed" not in log, log
    picked = [f"mmv.big.q{k}.count" for k in (0, 1022, 1023, 1024, 1499)]  # both kinds
    replay = subprocess.run(["pmdumplog", str(archive), *picked], capture_output=True, text=True)
    assert replay.returncode == 0, replay.stderr
    seen: dict[str, set[str]] = {}
    for name, value in re.findall(r"\((mmv\.big\.\S+)\): value (\S+)", replay.stdout):
        seen.setdefault(name, set()).add(value)
    before, after = replay.stdout.split("\n\n", 1)[1][:200], replay.stdout[-400:]
    assert set(seen) == set(picked), replay.stdout[:2000]
    for name in picked:  # its own value, and only that, before and after the restart
        k = int(name.split(".")[2][1:])
        assert seen[name] == {str(value_of(k, 1))}, (name, seen[name], before, after)
    samples = replay.stdout.count("(mmv.big.q1499.count): value")
    assert samples >= 8, replay.stdout
    dumped = subprocess.run(["pmdumplog", "-a", str(archive)], capture_output=True, text=True)
    ids = dict(re.findall(r"PMID: (\S+) \((mmv\.big\.\S+)\)", dumped.stdout))
    assert len(ids) == 1500 and len(set(ids.values())) == 1500  # one name per PMID


@pmcd_mark
def test_a_fuzzed_file_defining_spilled_names_twice_serves_each_pmid_once(
    private_pmcd: Any, mmv_dir: Path
) -> None:
    """The fuzzer's file (tests/data/hardening/served-twice.mmv) defines two names twice,
    every copy past item 1023: each name and PMID is served once, ``check`` judges it
    ``partial`` with each name once, and ``mmv.control.metrics`` and the file's
    ``mmv.control.file.metrics`` count each once."""
    path = mmv_dir / "served_twice"
    path.write_bytes((HARDENING / "served-twice.mmv").read_bytes())
    path.chmod(0o644)
    pmcd = private_pmcd(our_agent(mmv_dir, "--status-metrics"))
    ids = wait_served(pmcd, "mmv.served_twice", 1)
    assert len(set(ids.values())) == len(ids) > 1, ids
    assert pmcd.fetch("mmv.control.metrics") == {None: str(len(ids))}
    assert pmcd.fetch("mmv.control.file.metrics") == {"served_twice": str(len(ids))}
    assert pmcd.fetch("mmv.control.file.state") == {"served_twice": '"partial"'}
    [verdict] = check_json(mmv_dir, path)
    assert verdict["status"] == "partial"
    assert sorted(verdict["served"]) == sorted(ids)  # each name once, as the agent serves
    for s in verdict["spills"]:
        assert ids[s["name"]] == s["pmid"]
    assert len({s["pmid"] for s in verdict["spills"]}) == len(verdict["spills"]) > 1


def _catalogued(tmp_path: Path, builders: dict[str, mb.MmvBuilder]) -> list[FileEntry]:
    """Each builder's file written under its name and added, in order, to one catalogue."""
    c, entries = Catalogue(), []
    for name, b in builders.items():
        b.build().write(tmp_path / name)
        with MmvFile.open(str(tmp_path / name), name=name) as mf:
            entry = c.add(mf)
            assert entry is not None
            entries.append(entry)
    return entries
