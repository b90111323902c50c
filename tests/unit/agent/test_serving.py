"""The serving model (pmda_mmv.agent.serving, pmda_mmv.agent.control): what each request
answers, on real
files (tests/support/mmvbuild.py, tests/support/writers through mmvbuild), scanned and
catalogued as the agent does; no pmcd, no python3-pcp (but for the check of the PCP numbers
against cpmapi)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from pmda_mmv.agent import control, hold, serving, tables
from pmda_mmv.agent.hold import Hold
from pmda_mmv.agent.serving import Plan, Serving, pmid_key
from pmda_mmv.directory.filestate import OK, REFUSED, STATES, Changes
from pmda_mmv.directory.scanner import Scanner
from pmda_mmv.mmvfile import layout, pcpdefs
from pmda_mmv.mmvfile.errors import Changed
from pmda_mmv.mmvfile.pcpdefs import PM_IN_NULL
from pmda_mmv.namespace.catalogue import Catalogue
from pmda_mmv.namespace.family import Families
from pmda_mmv.namespace.served import CONTROL_CLUSTER, FileEntry
from tests.support import mmvbuild as mb
from tests.support.mmvbuild import MmvBuilder, publish, sample, single


class Served:
    """A directory scanned, catalogued and served as the agent does, minus python3-pcp:
    :meth:`step` takes the scanner's changes into the model the way ``pmda.MmvPMDA._apply``
    does (every old name leaves, then the new ones are served)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.logged: list[str] = []
        self.catalogue = Catalogue(log=self.logged.append)
        self.scanner = Scanner(str(path), self.catalogue, log=self.logged.append, budget=None)
        self.model = Serving(self.catalogue, self.logged.append, Families(self.catalogue, ()))
        self.changed: list[str] = []

    def step(self, changes: Changes | None = None) -> Plan:
        plan = self.model.apply(self.scanner.refresh(True) if changes is None else changes)
        for cluster, item in plan.pmids:
            self.model.unserve_metric(cluster, item)
        for cluster, item in plan.pmids:
            self.model.serve_metric(cluster, item)
        return plan

    def fetch(self, name: str, *insts: int) -> list[Any]:
        """One fetch of metric ``name``: each instance's result (PM_IN_NULL if none)."""
        [k] = [k for k, n in self.model.served_names.items() if n == name]
        cluster, item = k >> 10, k & 0x3FF
        self.model.prefetch()
        self.model.snapshot_cluster(cluster, self.reload)
        fetch = self.model.fetcher()
        return [fetch(cluster, item, i) for i in insts or (PM_IN_NULL,)]

    def reload(self, entry: FileEntry, error: Changed) -> None:
        self.changed.append(entry.name)
        self.step(self.scanner.reload(entry.name))

    def cluster_files(self, cluster: int) -> list[str]:
        return [e.name for e in self.model.by_cluster.get(cluster, [])]


@pytest.fixture
def served(tmp_path: Path) -> Served:
    return Served(tmp_path)


def shared(value: int, cluster: int = 7) -> MmvBuilder:
    """A NOPREFIX file serving mmv.shared.v (cluster, item 1): files of one application
    sharing a PMID (PCP QA 648)."""
    return single(cluster, value, "shared.v", flags=layout.FLAG_NOPREFIX)


def test_values_follow_the_file(served: Served) -> None:
    path = served.path / "app"
    single(5, 123).write(path)
    plan = served.step()
    assert plan == Plan([], [(5, 1)], True)
    assert served.fetch("mmv.app.v") == [[123, 1]]
    single(5, 456).write(path)  # same layout, in place: the snapshot of the next fetch
    assert served.fetch("mmv.app.v") == [[456, 1]]


def test_every_instance_and_type_from_one_snapshot(served: Served) -> None:
    sample().write(served.path / "s")
    served.step()
    for mtype, value in mb.TYPE_SAMPLES.items():
        name = f"mmv.s.m.t{layout.TYPE_NAMES[mtype]}"
        assert served.fetch(name, 0, 1, 7) == [[value, 1]] * 3, name
    assert served.fetch("mmv.s.m.tu32", 99) == [None]  # no such instance: no value


def test_a_shared_pmid_takes_each_instance_from_the_first_file(served: Served) -> None:
    def per_instance(*insts: tuple[int, str, int]) -> MmvBuilder:
        b = MmvBuilder(cluster=9, flags=layout.FLAG_NOPREFIX)
        b.indoms.append(mb.Indom(2, [mb.Instance(i, n) for i, n, _ in insts]))
        b.metrics.append(mb.Metric("pets.count", 1, indom=2))
        b.values += [mb.Value("pets.count", i, v) for i, _, v in insts]
        return b

    per_instance((1, "cat", 10), (2, "dog", 20)).write(served.path / "b")
    per_instance((2, "dog", 99), (3, "eel", 30)).write(served.path / "a")
    served.step()
    assert served.cluster_files(9) == ["a", "b"]
    assert served.fetch("mmv.pets.count", 1, 2, 3) == [[10, 1], [99, 1], [30, 1]]
    os.unlink(served.path / "a")
    served.step()
    assert served.fetch("mmv.pets.count", 1, 2, 3) == [[10, 1], [20, 1], None]


def test_many_files_of_one_cluster_keep_name_order(served: Served) -> None:
    """Files of one cluster added and removed in any order, many in one request, are
    listed in name order and the first name serves the shared PMID.  (A breaker run: 6,000
    tiny files sharing one cluster dropped the agent, whose table updates rebuilt and
    sorted the cluster's list once per file; Serving.apply rebuilds it once per request.)"""
    names = [f"f{n:04d}" for n in range(600)]
    for n, name in enumerate(reversed(names)):
        shared(n).write(served.path / name)
    plan = served.step()
    assert plan.pmids == [(7, 1)] and served.cluster_files(7) == names
    for name in names[:300:7]:
        os.unlink(served.path / name)
    shared(-1 & 0xFFFFFFFF).write(served.path / "e9999")  # before all: served first
    served.step()
    left = sorted(["e9999", *(n for n in names if n not in names[:300:7])])
    assert served.cluster_files(7) == left
    assert served.fetch("mmv.shared.v") == [[0xFFFFFFFF, 1]]
    assert len(served.catalogue.sources[(7, 1)]) == len(left)


def test_one_file_more_or_less_per_request(served: Served) -> None:
    for name in ("c", "a", "e"):
        shared(ord(name)).write(served.path / name)
        served.step()
    publish(served.path / "d", shared(4))  # a new file, and one replaced by a new inode
    publish(served.path / "a", shared(1))
    served.step()
    assert served.cluster_files(7) == ["a", "c", "d", "e"]
    assert served.fetch("mmv.shared.v") == [[1, 1]]
    for name in ("a", "c", "d", "e"):
        os.unlink(served.path / name)
    plan = served.step()
    assert plan.names and 7 not in served.model.by_cluster
    assert served.model.served_names == {} and served.model.tables == {}


def test_a_name_added_twice_serves_the_last_entry(served: Served) -> None:
    single(5, 1).write(served.path / "app")
    first = served.scanner.refresh(True)
    publish(served.path / "app", single(5, 2))
    second = served.scanner.refresh(True)
    held = Changes()
    held.extend(first)
    held.extend(second)
    served.step(held)
    assert served.cluster_files(5) == ["app"]
    assert served.fetch("mmv.app.v") == [[2, 1]]


def test_a_file_changed_under_a_fetch_is_reloaded(served: Served) -> None:
    path = served.path / "app"
    single(5, 1).write(path)
    served.step()
    b = single(5, 2)
    b.metrics.append(mb.Metric("w", 2))
    b.values.append(mb.Value("w", None, 3))
    b.generation += 1
    with open(path, "r+b") as f:  # in place, another generation: Changed at the snapshot
        f.write(bytes(b.build().data))
    assert served.fetch("mmv.app.v") == [[2, 1]]
    assert served.changed == ["app"]
    assert "mmv.app.w" in served.model.served_names.values()


def test_what_is_not_a_value(served: Served) -> None:
    b = single(5, 1)
    b.metrics.append(mb.Metric("odd", 2, layout.TYPE_NOSUPPORT))
    b.values.append(mb.Value("odd", None, 0))
    b.write(served.path / "app")
    served.step()
    assert served.fetch("mmv.app.odd") == [[pcpdefs.PM_ERR_APPVERSION, 0]]
    fetch = served.model.fetcher()
    assert fetch(5, 99, PM_IN_NULL) == [pcpdefs.PM_ERR_PMID, 0]
    served.model.prefetch()  # no snapshot taken (no refresh of the cluster): try again
    assert fetch(5, 1, PM_IN_NULL) == [pcpdefs.PM_ERR_AGAIN, 0]


def test_a_table_that_fails_to_build_is_logged_and_answers_again(served: Served) -> None:
    single(5, 1).write(served.path / "app")
    served.step()

    def broken() -> tables.Built:
        raise ValueError("boom")

    served.model.tables[pmid_key(5, 1)] = broken
    assert served.fetch("mmv.app.v") == [[pcpdefs.PM_ERR_AGAIN, 0]]
    assert served.logged[-1] == "fetch 5.1: ValueError: boom"


def test_labels_and_notes(served: Served) -> None:
    sample(version=3).write(served.path / "s")
    served.step()
    [entry] = served.catalogue.files.values()
    label = served.model.label
    assert json.loads(label(entry.cluster, layout.LABEL_CLUSTER, False)) == {"app": "sample"}
    pmid = (70 << 22) | (entry.cluster << 10) | 1
    assert label(pmid, layout.LABEL_ITEM, False) == "{}"
    assert json.loads(label(pmid, layout.LABEL_ITEM, True)) == {"item": True}
    [si] = entry.indoms.values()
    assert json.loads(label((70 << 22) | si.serial, layout.LABEL_INDOM, False)) == {"dom": 1}
    assert label(entry.cluster, layout.LABEL_INSTANCES, False) == "{}"  # not asked this way
    indom = (70 << 22) | si.serial
    assert json.loads(served.model.instance_label(indom, 7, False)) == {"inst": "seven"}
    assert served.model.instance_label(indom, 1, False) == "{}"
    assert served.model.label(4000, layout.LABEL_CLUSTER, False) == "{}"


def test_instance_labels_take_unsigned_ids(served: Served) -> None:
    b = MmvBuilder(version=3, cluster=4)
    b.indoms.append(mb.Indom(1, [mb.Instance(-5, "minus five")]))
    b.metrics.append(mb.Metric("m", 1, indom=1))
    b.values.append(mb.Value("m", -5, 1))
    b.labels.append(mb.Label(layout.LABEL_INSTANCES, 1, '{"sign":"minus"}', internal=-5))
    b.write(served.path / "neg")
    served.step()
    [entry] = served.catalogue.files.values()
    [si] = entry.indoms.values()
    got = served.model.instance_label((70 << 22) | si.serial, -5 & 0xFFFFFFFF, False)
    assert json.loads(got) == {"sign": "minus"}
    assert served.fetch("mmv.neg.m", -5 & 0xFFFFFFFF) == [[1, 1]]


def test_indom_as_served_merges_the_files(served: Served) -> None:
    def pets(*insts: tuple[int, str]) -> MmvBuilder:
        b = MmvBuilder(cluster=9, flags=layout.FLAG_NOPREFIX)
        b.indoms.append(mb.Indom(2, [mb.Instance(i, n) for i, n in insts], "pets", "the pets"))
        b.metrics.append(mb.Metric("pets.count", 1, indom=2))
        b.values += [mb.Value("pets.count", i, 1) for i, _ in insts]
        return b

    pets((1, "cat"), (2, "dog")).write(served.path / "a")
    pets((2, "hound"), (3, "eel")).write(served.path / "b")
    plan = served.step()
    [serial] = plan.serials
    got = served.model.indom(serial)
    assert got == serving.MergedIndom([(1, "cat"), (2, "dog"), (3, "eel")], "pets", "the pets")
    assert served.model.indom(serial + 1) is None


# -- the agent's own metrics -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "debug_options", "debug_type", "items"),
    [
        (False, False, layout.TYPE_I32, [0, 1, 2]),  # PCP 6's C agent
        (False, True, layout.TYPE_STRING, [0, 1, 2, 3]),  # PCP 7's
        (True, False, layout.TYPE_I32, [0, 1, 2, 3]),
    ],
)
def test_control_metrics_are_the_c_agent_s(
    status: bool, debug_options: bool, debug_type: int, items: list[int]
) -> None:
    own = control.control_metrics(status, debug_options)
    assert sorted(own) == items
    assert own[control.DEBUG].type == debug_type
    assert own[control.RELOAD].name == "control.reload"
    assert ("refused ones too" in own[control.FILES].helptext) is status
    assert {m.semantics for m in own.values()} == {layout.SEM_INSTANT}


def test_control_and_status_values(served: Served) -> None:
    single(5, 1).write(served.path / "app")
    (served.path / "junk").write_bytes(b"not mmv")
    served.step()
    model = served.model
    model.serve_control(control.FILES, lambda: len(served.catalogue.files))
    model.serve_status(served.scanner.states)
    fetch = model.fetcher()
    model.prefetch()
    assert fetch(CONTROL_CLUSTER, control.FILES, PM_IN_NULL) == [1, 1]
    states = served.scanner.states
    by_name = {name: s.instance for name, s in states.items()}
    state = [fetch(CONTROL_CLUSTER, 10, by_name[n]) for n in ("app", "junk")]
    assert state == [["ok", 1], ["refused", 1]]
    assert fetch(CONTROL_CLUSTER, 17, by_name["app"]) == [5, 1]
    assert fetch(CONTROL_CLUSTER, 13, by_name["junk"]) == [0, 1]
    codes = [fetch(CONTROL_CLUSTER, 19, by_name[n]) for n in ("app", "junk")]
    assert codes == [[STATES.index(OK), 1], [STATES.index(REFUSED), 1]]
    by_state = {s: fetch(CONTROL_CLUSTER, control.FILES_BY_STATE, i) for i, s in enumerate(STATES)}
    assert by_state == {s: [int(s in (OK, REFUSED)), 1] for s in STATES}


def test_status_metrics_are_distinct_and_described() -> None:
    names = [s.metric.name for s in control.FILE_STATUS.values()]
    assert len(set(names)) == len(names) and all(n.startswith("control.file.") for n in names)
    assert all(s.metric.oneline and s.metric.helptext for s in control.FILE_STATUS.values())
    own = {control.RELOAD, control.DEBUG, control.FILES, control.METRICS, control.FILES_BY_STATE}
    assert not set(control.FILE_STATUS) & own
    assert control.BY_STATE.name == "control.files_by_state"


# -- held changes ---------------------------------------------------------------------------


def test_changes_are_held_while_more_files_wait(served: Served) -> None:
    single(5, 1).write(served.path / "a")
    single(6, 1).write(served.path / "b")
    loaded = served.scanner.refresh(True)
    held = Hold()
    assert held.take(loaded, queued=5, now=0.0) is None  # more waiting: held back
    assert not held.due(hold.HOLD / 2)
    assert held.take(Changes(), queued=5, now=hold.HOLD) is None
    assert held.due(hold.HOLD)  # registered at the start of the request, before loading
    assert [e.name for e in held.release().added] == ["a", "b"]
    assert not held.due(200.0)
    assert held.take(Changes(), queued=0, now=200.0) == Changes()  # nothing held


def many(cluster: int, metrics: int) -> MmvBuilder:
    """A file of ``metrics`` singular metrics ``m<j>`` (items 1..)."""
    b = MmvBuilder(cluster=cluster)
    for j in range(metrics):
        b.metrics.append(mb.Metric(f"m{j}", j + 1))
        b.values.append(mb.Value(f"m{j}", None, j))
    return b


def test_names_held_past_held_names_are_registered_at_the_next_request(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by benchmarks/appear.py: 1,000 files of 1,000 metrics appearing at once were
    held for 0.3 s, 57,000 names, whose registration took 0.2-0.7 s of one request before
    python3-pcp's rebuild.  Past HELD_NAMES names they are registered at the next request,
    however short the hold."""
    monkeypatch.setattr(hold, "HELD_NAMES", 1500)
    held = Hold()
    many(5, 1000).write(served.path / "a")
    assert held.take(served.scanner.refresh(True), queued=5, now=0.0) is None
    assert not held.due(0.01)
    many(6, 1000).write(served.path / "b")
    assert held.take(served.scanner.refresh(True), queued=5, now=0.02) is None
    assert held.due(0.03) and held.names == 2000


def test_the_hold_restarts_after_the_request_that_registered(served: Served) -> None:
    """Found by benchmarks/appear.py: at 460,000 names python3-pcp's rebuild after each
    registration takes about a second, so what the registering request loaded had waited
    past HOLD at the next request: one file registered, and rebuilt, per request.  What it
    loads is held from the next request on."""
    held = Hold()
    single(5, 1).write(served.path / "a")
    assert held.take(served.scanner.refresh(True), queued=5, now=0.0) is None
    assert held.due(hold.HOLD)
    held.release()
    single(6, 1).write(served.path / "b")  # loaded by the request that registered a
    assert held.take(served.scanner.refresh(True), queued=5, now=hold.HOLD) is None
    after_rebuild = hold.HOLD + 1.0
    assert not held.due(after_rebuild)
    assert held.due(after_rebuild + hold.HOLD)
    assert [e.name for e in held.release().added] == ["b"]


def test_a_removal_releases_what_is_held(served: Served) -> None:
    single(5, 1).write(served.path / "a")
    held = Hold()
    assert held.take(served.scanner.refresh(True), queued=3, now=0.0) is None
    os.unlink(served.path / "a")
    single(6, 1).write(served.path / "b")
    taken = held.take(served.scanner.refresh(True), queued=3, now=0.0)
    assert taken is not None  # a was added and removed while held: never served
    assert taken.removed == [] and [e.name for e in taken.added] == ["b"]


def test_nothing_queued_applies_at_once(served: Served) -> None:
    single(5, 1).write(served.path / "a")
    taken = Hold().take(served.scanner.refresh(True), queued=0, now=0.0)
    assert taken is not None and [e.name for e in taken.added] == ["a"]


# -- the PCP numbers, checked against python3-pcp (no pmcd) ---------------------------------


def test_pcp_numbers_are_python3_pcp_s() -> None:
    import cpmapi as c_api  # python3-pcp (scripts/setup): fails, never skips, without it

    ours = {n: v for n, v in vars(pcpdefs).items() if n.startswith("PM_") and hasattr(c_api, n)}
    assert ours == {n: getattr(c_api, n) for n in ours}
    assert {"PM_ERR_PMID", "PM_IN_NULL", "PM_TYPE_64", "PM_SEM_COUNTER", "PM_MAXLABELS"} <= set(
        ours
    )
    assert (layout.LABEL_CLUSTER, layout.LABEL_ITEM, layout.LABEL_INDOM) == (
        c_api.PM_LABEL_CLUSTER,
        c_api.PM_LABEL_ITEM,
        c_api.PM_LABEL_INDOM,
    )
    types = {m.type for m in control.control_metrics(True, True).values()}
    types |= {s.metric.type for s in control.FILE_STATUS.values()}
    pcp_types = {c_api.PM_TYPE_32, c_api.PM_TYPE_U32, c_api.PM_TYPE_U64, c_api.PM_TYPE_STRING}
    assert types == pcp_types
    assert layout.SEM_INSTANT == c_api.PM_SEM_INSTANT


def test_string_values_are_read_once_per_snapshot(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A STRING metric over many instances: its values are right, and one fetch reads the
    string entries in a few reads (the snapshot and one run), not one per value."""
    n = 2000
    b = MmvBuilder(cluster=3)
    b.indoms.append(mb.Indom(1, [mb.Instance(i, f"i{i}") for i in range(n)]))
    b.metrics.append(mb.Metric("s", 1, layout.TYPE_STRING, indom=1))
    b.values += [mb.Value("s", i, "same" if i % 2 else f"v{i % 7}") for i in range(n)]
    b.write(served.path / "str")
    served.step()
    reads: list[int] = []
    pread = os.pread

    def counting(fd: int, length: int, offset: int) -> bytes:
        reads.append(length)
        return pread(fd, length, offset)

    monkeypatch.setattr(os, "pread", counting)
    got = served.fetch("mmv.str.s", *range(n))
    assert got == [["same" if i % 2 else f"v{i % 7}", 1] for i in range(n)]
    assert len(reads) <= 3  # header, values span, strings
    assert sum(reads) <= (served.path / "str").stat().st_size + layout.HEADER_SIZE


def test_string_offsets_moved_out_of_bounds_are_unsupported(served: Served) -> None:
    """A writer moves a value's string offset (live, in the values span) past the end of
    the file, or before the header's end: that value is PM_ERR_VALUE, the others read."""
    b = MmvBuilder(cluster=3)
    b.metrics += [mb.Metric(n, i, layout.TYPE_STRING) for i, n in enumerate("abc", 1)]
    b.values += [mb.Value(n, None, f"text {n}") for n in "abc"]
    image = b.build()
    image.write(served.path / "f")
    served.step()
    image.patch("values", 1, "extra", len(image.data) - 10)
    image.patch("values", 2, "extra", 8)
    image.write(served.path / "f")  # in place: same size and generation
    assert served.fetch("mmv.f.a") == [["text a", 1]]
    assert served.fetch("mmv.f.b") == [[pcpdefs.PM_ERR_VALUE, 0]]
    assert served.fetch("mmv.f.c") == [[pcpdefs.PM_ERR_VALUE, 0]]


def pets_file(*insts: int, label: bool = False) -> MmvBuilder:
    """A NOPREFIX file of cluster 9 whose indom 2 has the instances ``insts`` (named
    ``p<id>``), metrics ``pets.m0`` .. ``pets.m2``, and with ``label`` an instance label
    naming the file's first instance."""
    b = MmvBuilder(version=3, cluster=9, flags=layout.FLAG_NOPREFIX)
    b.indoms.append(mb.Indom(2, [mb.Instance(i, f"p{i}") for i in insts]))
    b.metrics += [mb.Metric(f"pets.m{j}", j + 1, indom=2) for j in range(3)]
    b.values += [mb.Value(f"pets.m{j}", i, i) for j in range(3) for i in insts]
    if label:
        payload = json.dumps({"first": insts[0]})
        b.labels += [mb.Label(layout.LABEL_INSTANCES, 2, payload, internal=i) for i in insts]
    return b


def test_instance_labels_of_a_shared_indom_need_no_scan_of_its_files(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: each instance label request scanned every file sharing the indom (4,000
    files: 29 s for one walk of the instances); the first file having each instance is
    found once per change, and each instance's labels are its first file's."""
    for f in range(40):
        pets_file(2 * f, 2 * f + 1, 2 * f + 2, label=True).write(served.path / f"f{f:02d}")
    [serial] = served.step().serials
    indom = (70 << 22) | serial
    looked = 0
    indom_of = served.model.indom

    def counting(serial: int) -> serving.MergedIndom | None:
        nonlocal looked
        looked += 1
        return indom_of(serial)

    monkeypatch.setattr(served.model, "indom", counting)
    got = {i: json.loads(served.model.instance_label(indom, i, False)) for i in range(81)}
    assert looked == 1
    # instance 2f+2 is in files f and f+1: the first file (f) has it
    assert got == {i: {"first": 2 * ((i - 1) // 2) if i else 0} for i in range(81)}
    assert served.model.instance_label(indom, 500, False) == "{}"
    os.unlink(served.path / "f00")
    pets_file(2, label=True).write(served.path / "e")  # before f01 in name order
    served.step()
    assert json.loads(served.model.instance_label(indom, 2, False)) == {"first": 2}
    assert served.model.instance_label(indom, 0, False) == "{}"  # f00's only
    assert json.loads(served.model.instance_label(indom, 3, False)) == {"first": 2}
    assert looked == 2


def test_a_file_more_sharing_a_pmid_makes_its_own_tables_only(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: each file arriving re-made the table builder of every file sharing its
    PMIDs; one file more makes one of its own per metric fetched, and values still come
    from the first file having each instance."""
    for f in range(20):
        pets_file(f, f + 1).write(served.path / f"f{f:02d}")
    served.step()
    assert served.fetch("mmv.pets.m1", 0, 20) == [[0, 1], [20, 1]]
    made: list[str] = []
    file_table = served.model.file_table

    def counting(entry: FileEntry, sm: Any) -> tables.Table:
        made.append(entry.name)
        return file_table(entry, sm)

    monkeypatch.setattr(served.model, "file_table", counting)
    pets_file(100, 0).write(served.path / "z")
    served.step()
    assert served.fetch("mmv.pets.m1", 0, 1, 20, 100) == [[0, 1], [1, 1], [20, 1], [100, 1]]
    os.unlink(served.path / "f00")
    served.step()
    assert served.fetch("mmv.pets.m1", 0, 1) == [[0, 1], [1, 1]]  # 0 now from z, 1 from f01
    assert made == ["z"]  # its one metric fetched
