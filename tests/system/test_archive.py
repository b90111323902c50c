"""pmlogger records pmda-mmv's metrics while writers update them and files come and go; the
archive then replays names, units, instances, labels and help intact, and no PMID changes
meaning during the recording.

One private pmcd serves a directory of libpcp_mmv files (tests.support.writers.libpcp_mmv.Registry):

* ``steady`` (cluster 20): a counter and a per-instance gauge, updated 4 times a second,
  with labels at cluster, item, indom and instance level and help text;
* ``auto`` (cluster 0: the agent assigns one), constant;
* ``leaving`` (21): removed after RECORD/5;
* ``arriving`` (22) and ``auto2`` (cluster 0): created after 2*RECORD/5;
* ``regen`` (23): rewritten after 3*RECORD/5 (new generation; instance ``one`` removed,
  ``three`` added, ``two`` changes value).

``pmlogger -t 1`` logs ``mmv`` for RECORD seconds; ``pmdumplog`` and ``pmrep -a`` read it back.
"""

from __future__ import annotations

import os
import re
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pmda_mmv.mmvfile.layout import SEM_COUNTER as COUNTER
from pmda_mmv.mmvfile.layout import TYPE_DOUBLE as DOUBLE
from pmda_mmv.mmvfile.layout import TYPE_U32 as U32
from pmda_mmv.mmvfile.layout import TYPE_U64 as U64
from tests.support.mmvbuild import COUNT
from tests.support.pmcd import PrivatePmcd, make_dir, our_agent
from tests.support.writers.libpcp_mmv import LABEL_STRING, Registry

pytestmark = pytest.mark.pmcd

RECORD = 15  # seconds of recording
STEP = RECORD / 5
# pmrep's interpreter is found through PATH (pmpython): python3-pcp lives in /usr/bin/python3
PMREP_ENV = dict(os.environ, PATH="/usr/bin:" + os.environ.get("PATH", ""))


@dataclass
class Recording:
    """The archive and what the writers did while it was recorded."""

    archive: Path
    pmcd: PrivatePmcd
    counts: set[int]  # every value steady.count was set to
    pmids_after: dict[str, str]  # the live agent's PMIDs when recording ended


def steady(mmv_dir: Path) -> Registry:
    r = Registry(mmv_dir / "steady", 20).indom(1, [(0, "a"), (1, "b")], "two", "two instances")
    r.metric("count", 1, U64, COUNTER, COUNT, short="a counter", long="counts up")
    r.metric("g", 2, DOUBLE, indom=1, short="gauge")
    r.registry_label("app", '"steady"', LABEL_STRING)
    r.metric_label(1, "m", '"count"', LABEL_STRING)
    r.indom_label(1, "dom", '"two"', LABEL_STRING)
    r.instance_label(1, 0, "which", '"first"', LABEL_STRING)
    return r.start()


def regen(mmv_dir: Path, insts: dict[int, tuple[str, int]]) -> Registry:
    r = Registry(mmv_dir / "regen", 23).indom(1, [(i, n) for i, (n, _) in insts.items()])
    r.metric("v", 1, U32, indom=1).start()
    for name, value in insts.values():
        r.set("v", name, value)
    return r


def single(mmv_dir: Path, name: str, cluster: int, metric: str, value: int) -> Registry:
    return Registry(mmv_dir / name, cluster).metric(metric, 1, U32).start().set(metric, None, value)


@pytest.fixture(scope="module")
def recording(private_base: Path, pcp_required: None) -> Iterator[Recording]:
    """Record once for the module (RECORD seconds)."""
    base = make_dir(private_base / "archive")
    mmv_dir = make_dir(base / "tmp" / "mmv")
    keep: list[Any] = [steady(mmv_dir), regen(mmv_dir, {1: ("one", 1), 2: ("two", 2)})]
    keep += [single(mmv_dir, "leaving", 21, "x", 1), single(mmv_dir, "auto", 0, "y", 2)]
    pmcd = PrivatePmcd(base / "pmcd", [our_agent(mmv_dir)])
    pmcd.start()
    try:
        yield record(pmcd, base, mmv_dir, keep)
    finally:
        pmcd.stop()


def record(pmcd: PrivatePmcd, base: Path, mmv_dir: Path, keep: list[Any]) -> Recording:
    """Run pmlogger while the writers update values and files come and go."""
    conf = base / "pmlogger.conf"
    conf.write_text("log mandatory on every 1 second {\n    mmv\n}\n")
    archive = base / "archive"
    logger = subprocess.Popen(
        [
            *("pmlogger", "-h", pmcd.host, "-c", str(conf), "-t", "1", "-T", f"{RECORD}sec"),
            *("-l", str(base / "pmlogger.log"), str(archive)),
        ],
        env=dict(os.environ, PCP_TMP_DIR=str(pmcd.tmp_dir)),
    )
    counts = {0}  # libpcp_mmv starts values at 0
    stop = threading.Event()

    def update() -> None:
        k = 0
        while not stop.wait(0.25):
            k += 1
            counts.add(k)
            keep[0].set("count", None, k).set("g", "a", k / 2).set("g", "b", -k)

    updater = threading.Thread(target=update)
    updater.start()
    try:
        time.sleep(STEP)
        (mmv_dir / "leaving").unlink()
        time.sleep(STEP)
        keep.append(single(mmv_dir, "arriving", 22, "z", 9))
        keep.append(single(mmv_dir, "auto2", 0, "w", 4))
        time.sleep(STEP)
        keep.append(regen(mmv_dir, {2: ("two", 22), 3: ("three", 3)}))
        assert logger.wait(RECORD * 2) == 0, (base / "pmlogger.log").read_text()
    finally:
        stop.set()
        updater.join()
        if logger.poll() is None:
            logger.kill()
    pmids = pmcd.run("pminfo", "-m", "mmv").stdout
    return Recording(archive, pmcd, counts, dict(re.findall(r"^(\S+) PMID: (\S+)$", pmids, re.M)))


def dump(archive: Path, *opts: str) -> str:
    done = subprocess.run(["pmdumplog", *opts, str(archive)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout


def descriptors(text: str) -> list[tuple[str, list[str], str]]:
    """``pmdumplog -d`` -> [(PMID, names, descriptor text)], one per descriptor record."""
    out = []
    for m in re.finditer(r"^PMID: (\S+) \((.*)\)\n((?:    .*\n)+)", text, re.M):
        out.append((m.group(1), m.group(2).split(", "), m.group(3)))
    return out


def indoms(text: str) -> dict[str, list[dict[int, str]]]:
    """``pmdumplog -i`` -> {indom: [{internal: external} of each record, in time order]}."""
    out: dict[str, list[dict[int, str]]] = {}
    current: list[dict[int, str]] = []
    for line in text.splitlines():
        if m := re.match(r"^InDom: (\S+)$", line):
            current = out.setdefault(m.group(1), [])
        elif re.match(r"^\S+ \d+ instances?$", line):
            current.append({})
        elif m := re.match(r'^\s+(-?\d+) or "(.*)"$', line):
            current[-1][int(m.group(1))] = m.group(2)
    return out


def replay(archive: Path, *metrics: str) -> list[dict[str, str]]:
    """``pmrep -a -u -r -o csv``: one {column: value} per logged sample ("" = no value)."""
    done = subprocess.run(
        ["pmrep", "-a", str(archive), "-u", "-r", "-o", "csv", *metrics],
        capture_output=True,
        text=True,
        env=PMREP_ENV,
    )
    assert done.returncode == 0, done.stderr
    header, *rows = done.stdout.splitlines()
    columns = [column_key(c.strip('"')) for c in header.split(",")]
    return [dict(zip(columns, row.split(","), strict=True)) for row in rows]


def column_key(column: str) -> str:
    """A pmrep CSV column as ``metric[instance]``: pmrep 7.x writes that, 6.x writes
    ``metric-instance`` (metric names never contain ``-``)."""
    metric, dash, inst = column.partition("-")
    return f"{metric}[{inst}]" if dash and "[" not in metric else column


def test_pmids_keep_one_meaning(recording: Recording) -> None:
    descs = descriptors(dump(recording.archive, "-d"))
    mmv = [(pmid, names, desc) for pmid, names, desc in descs if pmid.startswith("70.")]
    pmids = [pmid for pmid, _, _ in mmv]
    names = [n for _, ns, _ in mmv for n in ns]
    assert len(pmids) == len(set(pmids)), "a PMID was described twice"
    assert all(len(ns) == 1 for _, ns, _ in mmv) and len(names) == len(set(names))
    by_name = {ns[0]: pmid for pmid, ns, _ in mmv}
    expected = {"mmv.steady.count", "mmv.steady.g", "mmv.regen.v", "mmv.auto.y"}
    expected |= {"mmv.leaving.x", "mmv.arriving.z", "mmv.auto2.w", "mmv.control.files"}
    assert expected <= set(by_name)
    for name, pmid in recording.pmids_after.items():
        assert by_name.get(name, pmid) == pmid, f"{name} is {pmid} now"
    assert by_name["mmv.steady.count"] == "70.20.1" and by_name["mmv.leaving.x"] == "70.21.1"
    assert by_name["mmv.auto.y"] != by_name["mmv.auto2.w"]
    assert "mmv.leaving.x" not in recording.pmids_after


def test_units_and_semantics_replayed(recording: Recording) -> None:
    descs = {ns[0]: d for _, ns, d in descriptors(dump(recording.archive, "-d"))}
    assert "64-bit unsigned int" in descs["mmv.steady.count"]
    assert "Semantics: counter  Units: count" in descs["mmv.steady.count"]
    assert "Data Type: double" in descs["mmv.steady.g"]
    assert "Semantics: instant  Units: none" in descs["mmv.steady.g"]
    shown = subprocess.run(
        [
            *("pmrep", "-a", str(recording.archive), "-u", "-r", "-g", "-s", "1"),
            *("mmv.steady.count", "mmv.steady.g"),
        ],
        capture_output=True,
        text=True,
        env=PMREP_ENV,
    ).stdout
    assert "- mmv.steady.count - count" in shown
    assert '- mmv.steady.g["a"] - none' in shown and '- mmv.steady.g["b"] - none' in shown


def test_instances_follow_the_rewrite(recording: Recording) -> None:
    descs = {ns[0]: d for _, ns, d in descriptors(dump(recording.archive, "-d"))}
    records = indoms(dump(recording.archive, "-i"))
    regen_indom = re.search(r"InDom: (\S+) ", descs["mmv.regen.v"])
    steady_indom = re.search(r"InDom: (\S+) ", descs["mmv.steady.g"])
    assert regen_indom and steady_indom
    assert records[steady_indom.group(1)] == [{0: "a", 1: "b"}]
    assert records[regen_indom.group(1)] == [{1: "one", 2: "two"}, {2: "two", 3: "three"}]


def test_values_replayed(recording: Recording) -> None:
    rows = replay(
        recording.archive,
        *("mmv.steady.count", "mmv.steady.g", "mmv.regen.v", "mmv.auto.y"),
        *("mmv.leaving.x", "mmv.arriving.z", "mmv.auto2.w"),
    )
    assert len(rows) >= RECORD - 2
    counts = [int(r["mmv.steady.count"]) for r in rows]
    assert counts == sorted(counts) and len(set(counts)) > RECORD // 2
    assert set(counts) <= recording.counts
    assert {float(r["mmv.steady.g[a]"]) * 2 for r in rows} <= recording.counts
    assert {r["mmv.auto.y"] for r in rows} == {"2"}, "auto's PMID kept its meaning"

    def life(column: str) -> str:
        """The column as a string of '+' (value) and '.' (none), runs collapsed."""
        return re.sub(r"(.)\1+", r"\1", "".join("+" if r[column] else "." for r in rows))

    assert life("mmv.leaving.x") == "+."
    assert life("mmv.arriving.z") == life("mmv.auto2.w") == ".+"
    assert life("mmv.regen.v[one]") == "+." and life("mmv.regen.v[three]") == ".+"
    assert {r["mmv.regen.v[two]"] for r in rows} == {"2", "22"}
    assert next(r["mmv.regen.v[three]"] for r in rows if r["mmv.regen.v[three]"]) == "3"


def test_labels_and_help_replayed(recording: Recording) -> None:
    labels = dump(recording.archive, "-e")
    for line in (
        r'Domain 70 labels \(\d+ bytes\): \{"agent":"mmv"\}',
        r'Cluster 70\.20 labels \(\d+ bytes\): \{"app":"steady"\}',
        r'PMID 70\.20\.1 labels \(\d+ bytes\): \{"m":"count"\}',
        r'InDom 70\.\d+ labels \(\d+ bytes\): \{"dom":"two"\}',
        r'InDom 70\.\d+\[0\] labels \(\d+ bytes\): \{"which":"first"\}',
    ):
        assert re.search(line, labels), line
    help_text = dump(recording.archive, "-h")
    assert "PMID: 70.20.1 [a counter]\nPMID: 70.20.1\ncounts up" in help_text
    assert re.search(r"InDom: 70\.\d+ \[two\]\nInDom: 70\.\d+\ntwo instances", help_text)
    # the same through the archive's label lookups (pminfo -a -l)
    shown = subprocess.run(
        ["pminfo", "-a", str(recording.archive), "-l", "mmv.steady.g", "mmv.steady.count"],
        capture_output=True,
        text=True,
    ).stdout
    assert '"m":"count"' in shown and '"dom":"two"' in shown
    assert re.search(r'inst \[0 or "a"\] labels \{.*"which":"first"', shown)
