"""Catalogue: many files to one PCP namespace (no pmcd needed)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from pmda_mmv.mmvfile import layout, pmunits
from pmda_mmv.mmvfile.pcpdefs import PM_SEM_COUNTER, PM_TYPE_64
from pmda_mmv.mmvfile.reader import MmvFile
from pmda_mmv.namespace import indomnumbers, nametree, served
from pmda_mmv.namespace.catalogue import Catalogue
from pmda_mmv.namespace.indomnumbers import c_indom
from pmda_mmv.namespace.indomserial import wanted_indoms
from pmda_mmv.namespace.registry import Registry
from tests.support import hostile
from tests.support.mmvbuild import Indom, Instance, Label, Metric, MmvBuilder, Value, sample


def simple(cluster: int = 1, names: tuple[str, ...] = ("a",), flags: int = 0) -> MmvBuilder:
    b = MmvBuilder(cluster=cluster, flags=flags)
    for item, name in enumerate(names, 1):
        b.metrics.append(Metric(name, item))
        b.values.append(Value(name, None, item))
    return b


@pytest.fixture
def logged() -> list[str]:
    return []


@pytest.fixture
def cat(logged: list[str]) -> Catalogue:
    return Catalogue(log=logged.append)


def load(tmp_path: Path, name: str, b: MmvBuilder) -> MmvFile:
    b.write(tmp_path / name)
    return MmvFile.open(str(tmp_path / name))


def names(cat: Catalogue) -> set[str]:
    return {m.name for e in cat.files.values() for m in e.metrics}


def test_names_prefix_and_noprefix(tmp_path: Path, cat: Catalogue) -> None:
    cat.add(load(tmp_path, "app", simple(names=("x.y",))))
    cat.add(load(tmp_path, "np", simple(cluster=2, names=("top",), flags=layout.FLAG_NOPREFIX)))
    assert names(cat) == {"mmv.app.x.y", "mmv.top"}


def test_duplicate_name_first_served_wins(
    tmp_path: Path, cat: Catalogue, logged: list[str]
) -> None:
    cat.add(load(tmp_path, "foo", simple(names=("x",))))
    entry = cat.add(
        load(tmp_path, "np", simple(cluster=2, names=("foo.x", "ok"), flags=layout.FLAG_NOPREFIX))
    )
    assert entry is not None
    assert [m.name for m in entry.metrics] == ["mmv.ok"]
    assert any("mmv.foo.x is already served" in line and "np" in line for line in logged)


def test_leaf_nonleaf_conflicts_refused_both_ways(
    tmp_path: Path, cat: Catalogue, logged: list[str]
) -> None:
    entry = cat.add(load(tmp_path, "f", simple(names=("a", "a.b", "c.d", "c"))))
    assert entry is not None
    assert [m.name for m in entry.metrics] == ["mmv.f.a", "mmv.f.c.d"]
    assert len(entry.problems) == 2
    assert any("mmv.f.a is already a leaf" in str(p) for p in entry.problems)
    assert any("mmv.f.c is a non-leaf" in str(p) for p in entry.problems)


def test_control_subtree_is_reserved(tmp_path: Path, cat: Catalogue) -> None:
    b = simple(
        names=("control.reload", "control", "control.x.y", "fine"), flags=layout.FLAG_NOPREFIX
    )
    entry = cat.add(load(tmp_path, "np", b))
    assert entry is not None
    assert [m.name for m in entry.metrics] == ["mmv.fine"]
    assert all("reserved" in str(p) for p in entry.problems)


def test_file_name_not_a_name_component_is_refused(
    tmp_path: Path, cat: Catalogue, logged: list[str]
) -> None:
    assert cat.add(load(tmp_path, "my-app", simple())) is None
    assert "my-app" in logged[0] and "not a valid metric name component" in logged[0]
    assert not cat.files


def test_removed_names_can_be_served_again(tmp_path: Path, cat: Catalogue) -> None:
    cat.add(load(tmp_path, "foo", simple(names=("x",))))
    cat.remove("foo")
    entry = cat.add(
        load(tmp_path, "np", simple(cluster=2, names=("foo.x",), flags=layout.FLAG_NOPREFIX))
    )
    assert entry is not None and [m.name for m in entry.metrics] == ["mmv.foo.x"]


def test_explicit_clusters_honoured_and_never_shared(
    tmp_path: Path, cat: Catalogue, logged: list[str]
) -> None:
    a = cat.add(load(tmp_path, "aaa", simple(cluster=5)))
    b = cat.add(load(tmp_path, "bbb", simple(cluster=5)))
    assert a is not None and b is not None
    assert a.cluster == 5 and b.cluster not in (0, 5)
    assert any("asked for cluster 5, served to aaa: served as cluster" in x for x in logged)


def test_cluster_zero_gets_lowest_free_not_requested(tmp_path: Path, cat: Catalogue) -> None:
    # The C agent gives 'ccc' cluster 2, aliasing 'aaa' (pmdammv-reference.md 5.2).
    aaa = cat.add(load(tmp_path, "aaa", simple(cluster=2)), {1})
    ccc = cat.add(load(tmp_path, "ccc", simple(cluster=0)), {1, 2})
    bbb = cat.add(load(tmp_path, "bbb", simple(cluster=1)), {2})
    assert aaa is not None and bbb is not None and ccc is not None
    assert (aaa.cluster, bbb.cluster, ccc.cluster) == (2, 1, 3)


def test_reloaded_file_keeps_its_cluster(tmp_path: Path, cat: Catalogue) -> None:
    first = cat.add(load(tmp_path, "auto", simple(cluster=0)))
    cat.add(load(tmp_path, "other", simple(cluster=0)))
    assert first is not None
    cluster = first.cluster
    again = cat.add(load(tmp_path, "auto", simple(cluster=0, names=("a", "b"))))
    assert again is not None and again.cluster == cluster


def test_a_moved_file_keeps_its_cluster_while_the_one_it_yielded_to_restarts(
    tmp_path: Path, cat: Catalogue
) -> None:
    """Found by a breaker run: 'att' asked for 'vic''s cluster and was moved; while 'vic''s
    writer restarted, a reload of 'att' took cluster 60, and 'vic' came back elsewhere, so
    the victim's PMIDs served the stranger's values."""
    vic = cat.add(load(tmp_path, "vic", simple(cluster=60)))
    att = cat.add(load(tmp_path, "att", simple(cluster=60)))
    assert vic is not None and att is not None and att.cluster != 60
    moved = att.cluster
    cat.remove("vic")  # the victim's writer restarts
    cat.remove("att")
    att = cat.add(load(tmp_path, "att", simple(cluster=60)))  # touched meanwhile
    vic = cat.add(load(tmp_path, "vic", simple(cluster=60)))
    assert att is not None and vic is not None
    assert (vic.cluster, att.cluster) == (60, moved)
    cat.remove("att")  # a writer that asks for another cluster gets it
    att = cat.add(load(tmp_path, "att", simple(cluster=61)))
    assert att is not None and att.cluster == 61


def test_departed_names_are_remembered_up_to_a_bound(tmp_path: Path) -> None:
    # The soak test churns thousands of new names; files named by PID never come back.
    cat = Catalogue(registry=Registry(cap=8))
    assert cat.add(load(tmp_path, "stays", simple(cluster=0))) is not None
    for n in range(40):
        assert cat.add(load(tmp_path, f"gone{n}", simple(cluster=0))) is not None
        cat.remove(f"gone{n}")
    names = {name for name, _ in cat.registry.records}
    assert len(names) <= 8 * 9 // 8 + 1  # pruned at an add, back to 8, then one more left
    assert "stays" in names  # present: never forgotten, however old
    assert "gone39" in names and "gone0" not in names  # oldest go first


def test_indom_serials_pack_like_the_reference_and_never_alias(
    tmp_path: Path, cat: Catalogue
) -> None:
    low = cat.add(load(tmp_path, "low", sample()))  # cluster 12, serial 3
    high = sample()
    high.cluster = 3000
    big = cat.add(load(tmp_path, "big", high))
    assert low is not None and big is not None
    assert low.indoms[3].serial == (12 << 11) | 3
    assert big.indoms[3].serial == ((3000 << 11) | 3) & 0x3FFFFF  # as C: it aliases nothing
    assert big.indoms[3].serial != low.indoms[3].serial


def indoms(cluster: int, *serials: int) -> MmvBuilder:
    """Indoms of these serials, each with a metric over it (an indom no metric uses is not
    served: it has no PCP number)."""
    b = MmvBuilder(cluster=cluster, version=2)
    for k, s in enumerate(serials):
        b.indoms.append(Indom(s, [Instance(s % 1000, f"i{s}")]))
        b.metrics.append(Metric(f"over{s}", k + 1, indom=s))
    return b


def test_aliased_indom_gets_a_number_of_its_own_that_it_keeps(tmp_path: Path) -> None:
    # C packs (1, 4097) and (3, 1) into one indom, 6145: the first served keeps 6145
    cat = Catalogue()
    p = cat.add(load(tmp_path, "p", indoms(1, 4097)))
    q = cat.add(load(tmp_path, "q", indoms(3, 1)))
    assert p is not None and q is not None
    assert p.indoms[4097].serial == 6145 and q.indoms[1].serial not in (0, 6145)
    mine = q.indoms[1].serial  # not load-order dependent
    assert mine == indomnumbers.derived_indom(
        "q", 1, cat.registry.secret
    )  # not load-order dependent
    for _ in range(3):  # q's writer restarts, p goes and comes back
        cat.remove("q")
        cat.remove("p")
        p = cat.add(load(tmp_path, "p", indoms(1, 4097)))
        q = cat.add(load(tmp_path, "q", indoms(3, 1)))
        assert p is not None and q is not None
        assert (p.indoms[4097].serial, q.indoms[1].serial) == (6145, mine)


def test_in_one_scan_a_lossless_pair_wins_its_number(tmp_path: Path) -> None:
    files = [load(tmp_path, "p", indoms(1, 4097)), load(tmp_path, "q", indoms(3, 1))]
    cat = Catalogue()
    wanted = wanted_indoms(files)
    p, q = (cat.add(f, None, wanted) for f in files)
    assert p is not None and q is not None
    assert q.indoms[1].serial == 6145 and p.indoms[4097].serial == indomnumbers.derived_indom(
        "p", 4097, cat.registry.secret
    )


def test_a_file_full_of_overflowing_indoms_drains_nothing(tmp_path: Path) -> None:
    # 2,047 empty indoms of serial >= 2048 must not take every pool serial
    cat = Catalogue()
    drain = cat.add(load(tmp_path, "drain", indoms(5, *range(2048, 2048 + 2047))))
    victim = sample()
    victim.cluster = 3000
    entry = cat.add(load(tmp_path, "victim", victim))
    assert drain is not None and entry is not None
    assert len(set(si.serial for si in drain.indoms.values())) == 2047
    assert not entry.problems and entry.indoms[3].serial == ((3000 << 11) | 3) & 0x3FFFFF


def per_instance(name: str, item: int, *instances: tuple[int, str]) -> MmvBuilder:
    """Cluster 30, indom serial 5 holding ``instances``, metric ``name`` at ``item`` on it."""
    b = MmvBuilder(cluster=30, version=2)
    b.indoms.append(Indom(5, [Instance(i, n) for i, n in instances]))
    b.metrics.append(Metric(name, item, indom=5))
    b.values += [Value(name, i, i) for i, _ in instances]
    return b


def test_a_stranger_cannot_join_a_cluster_or_its_indoms(tmp_path: Path) -> None:
    # another file's cluster and indom serial, its own metric at another item: it
    # agrees with the victim, but another user wrote it
    cat = Catalogue()
    vic = cat.add(load(tmp_path, "vic", per_instance("per", 1, (1, "mine"))))
    per_instance("x", 2, (2, "theirs")).write(tmp_path / "att")
    os.chown(tmp_path / "att", 65534, 65534)
    att = cat.add(MmvFile.open(str(tmp_path / "att")))
    assert vic is not None and att is not None
    assert vic.cluster == 30 and att.cluster != 30
    victim_indom = vic.indoms[5].serial
    assert [i.external for i in cat.instances(victim_indom)] == ["mine"]
    assert [i.external for i in cat.instances(att.indoms[5].serial)] == ["theirs"]
    # the same owner may join (PCP QA 648's writers)
    friend = cat.add(load(tmp_path, "friend", per_instance("y", 3, (3, "ours"))))
    assert friend is not None and friend.cluster == 30
    assert [i.external for i in cat.instances(victim_indom)] == ["ours", "mine"]  # name order


def test_descriptors_elapsed_and_semantics_zero(tmp_path: Path, cat: Catalogue) -> None:
    b = MmvBuilder(cluster=3)
    b.metrics += [
        Metric("el", 1, layout.TYPE_ELAPSED, layout.SEM_INSTANT, pmunits.units_word(dim_count=1)),
        Metric("zero", 2, layout.TYPE_U64, 0, pmunits.units_word(dim_space=1)),
    ]
    b.values += [Value("el", None, 5), Value("zero", None, 6)]
    entry = cat.add(load(tmp_path, "d", b))
    assert entry is not None
    el, zero = entry.metrics
    assert (el.type, el.semantics, el.units) == (PM_TYPE_64, PM_SEM_COUNTER, pmunits.UNITS_ELAPSED)
    assert (zero.type, zero.semantics, zero.units) == (
        layout.TYPE_U64,
        PM_SEM_COUNTER,
        pmunits.units_word(dim_space=1),
    )


def test_labels_every_level_optional_and_override(tmp_path: Path, cat: Catalogue) -> None:
    b = sample(version=3)
    b.cluster = 0  # writers store the requested cluster (0) as the identity (C loses these)
    b.labels = [
        Label(layout.LABEL_CLUSTER, 0, '{"app":"one","n":-1.5e3}'),
        Label(layout.LABEL_CLUSTER, 0, '{"app":"two"}'),
        Label(layout.LABEL_CLUSTER | layout.LABEL_OPTIONAL, 0, '{"note":"x"}'),
        Label(layout.LABEL_ITEM, 1, '{"item":1}'),
        Label(layout.LABEL_INDOM, 3, '{"dom":"d"}'),
        Label(layout.LABEL_INSTANCES, 3, '{"inst":"é"}', internal=7),
    ]
    entry = cat.add(load(tmp_path, "lab", b))
    assert entry is not None
    assert entry.labels == '{"app":"two","n":-1.5e3}'
    assert json.loads(entry.notes) == {"note": "x"}
    first = next(m for m in entry.metrics if m.item == 1)
    assert json.loads(first.labels) == {"item": 1}
    indom = entry.indoms[3]
    assert json.loads(indom.labels) == {"dom": "d"}
    assert indom.instance_labels == {7: ('{"inst":"é"}', "")}


def test_label_maps_merge_name_by_name(tmp_path: Path, cat: Catalogue) -> None:
    # PCP QA 683: two item labels {"item_label3":{"a":1}} and {"item_label3":{"b":2}} give
    # item_label3.a and item_label3.b, as libpcp merges label sets.
    b = sample(version=3)
    b.labels = [
        Label(layout.LABEL_ITEM, 1, '{"m":{"a":1},"x":1}'),
        Label(layout.LABEL_ITEM, 1, '{"m":{"b":2},"x":2}'),
    ]
    entry = cat.add(load(tmp_path, "maps", b))
    assert entry is not None
    first = next(m for m in entry.metrics if m.item == 1)
    assert json.loads(first.labels) == {"m": {"a": 1, "b": 2}, "x": 2}


def pets(names: tuple[tuple[int, str], ...], cluster: int = 420) -> MmvBuilder:
    """PCP QA 648's writers (mmv_instances): NOPREFIX, one cluster, metric animals.tag on
    indom 1, each process its own animals."""
    b = MmvBuilder(cluster=cluster, flags=layout.FLAG_NOPREFIX)
    b.indoms.append(Indom(1, [Instance(i, n) for i, n in names], "animals", "animal names"))
    b.metrics.append(Metric("animals.tag", 33, layout.TYPE_U32, layout.SEM_DISCRETE, 0, 1, "tag"))
    b.values += [Value("animals.tag", i, i) for i, _ in names]
    return b


def test_writers_of_one_metric_share_its_cluster_and_indom(
    tmp_path: Path, cat: Catalogue, logged: list[str]
) -> None:
    cats = cat.add(load(tmp_path, "cats", pets(((10, "Tom"),))))
    dogs = cat.add(load(tmp_path, "dogs", pets(((0, "Fido"), (1, "Brutus"), (10, "Rex")))))
    assert cats is not None and dogs is not None
    assert cats.cluster == dogs.cluster == 420 and not logged
    assert [m.name for m in cat.sources[(420, 33)]] == ["mmv.animals.tag"] * 2
    serial = (420 << 11) | 1
    # first name of an internal id wins, files in name order (as the C agent merges)
    assert [(i.internal, i.external) for i in cat.instances(serial)] == [
        (10, "Tom"),
        (0, "Fido"),
        (1, "Brutus"),
    ]
    cat.remove("cats")
    assert [i.external for i in cat.instances(serial)] == ["Fido", "Brutus", "Rex"]
    assert names(cat) == {"mmv.animals.tag"}
    cat.remove("dogs")
    assert not (cat.sources or cat.indom_sources or cat.leaves)


def test_a_different_metric_at_a_shared_item_gets_its_own_cluster(
    tmp_path: Path, cat: Catalogue, logged: list[str]
) -> None:
    cat.add(load(tmp_path, "cats", pets(((10, "Tom"),))))
    other = pets(((1, "x"),))
    other.metrics[0].type = layout.TYPE_U64  # same name and item, another descriptor
    entry = cat.add(load(tmp_path, "odd", other))
    assert entry is not None and entry.cluster != 420
    assert any("asked for cluster 420, served to" in line for line in logged)


def test_files_sharing_a_metric_are_kept_in_name_order_by_binary_search(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by a breaker run: 6,000 tiny files sharing one cluster got the agent dropped:
    each add re-sorted the PMID's and the indom's list of files (N^2 / 2 key reads in all),
    each removal rebuilt them.  Now O(log N) reads an add or removal, order unchanged: the
    first file in name order describes the metric."""
    b = MmvBuilder(cluster=210, flags=layout.FLAG_NOPREFIX)
    b.indoms.append(Indom(1, [Instance(0, "w")]))
    b.metrics.append(Metric("shared.v", 1, layout.TYPE_U64, indom=1))
    b.values.append(Value("shared.v", 0, 1))
    b.write(tmp_path / "image")
    reads = [0]
    by_file = served._by_file

    def counted(x: served._FromFile) -> str:
        reads[0] += 1
        return by_file(x)

    monkeypatch.setattr(served, "_by_file", counted)
    count = 400
    names = [f"w{(k * 7919) % count:04d}" for k in range(count)]  # not in name order
    cat = Catalogue()
    for name in names:
        assert cat.add(MmvFile.open(str(tmp_path / "image"), name=name)) is not None
    gone = names[::2]
    for name in gone:
        entry = cat.remove(name)
        assert entry is not None
        entry.mf.close()
    left = sorted(set(names) - set(gone))
    assert [s.file for s in cat.sources[(210, 1)]] == left
    assert [s.file for s in cat.indom_sources[c_indom(210, 1)]] == left
    assert reads[0] <= 4 * (count + len(gone)) * count.bit_length()  # N^2 / 2 = 80,000 a list
    for name in left:
        entry = cat.remove(name)
        assert entry is not None
        entry.mf.close()
    assert not (cat.sources or cat.indom_sources or cat.tree)


def test_deep_names_cost_one_node_per_new_component(monkeypatch: pytest.MonkeyPatch) -> None:
    """Found by a breaker run: names of 100 components (1,000 a file, 30 files) got the agent
    dropped: the name rules built every prefix of every name as a string (O(depth^2) a
    name).  Now one walk of a tree of name components: a name makes a node only for each
    component above its leaf not served yet (every leaf is one shared node), and the rules
    hold at any depth."""
    made = [0]

    class Counted(nametree._Node):
        __slots__ = ()

        def __init__(self) -> None:
            made[0] += 1
            super().__init__()

    monkeypatch.setattr(nametree, "_Node", Counted)
    cat = Catalogue()
    stem = "mmv.f." + ".".join(["d"] * 98)
    for j in range(1000):
        assert cat.name_conflict(f"{stem}.m{j}") is None
        cat.tree.claim(f"{stem}.m{j}")
    assert made[0] == 1 + 100  # the root and mmv.f.d...d: a leaf is one shared node
    assert cat.name_conflict(stem) == f"{stem} is a non-leaf of names already served"
    assert cat.name_conflict(f"{stem}.m5") == f"{stem}.m5 is already served"
    assert cat.name_conflict(f"{stem}.m5.x.y") == f"{stem}.m5 is already a leaf"
    assert cat.name_conflict("mmv.control.x") == "mmv.control.x is reserved for the agent"
    for j in range(1000):
        cat.tree.release(f"{stem}.m{j}")
    assert not cat.tree and not cat.leaves


def test_cluster_0_files_get_the_lowest_free_cluster_as_files_come_and_go(tmp_path: Path) -> None:
    """The search for a free cluster starts at the lowest that may be free (it started at
    1 for every file: N cluster-0 files cost N^2 / 2 steps); a cluster freed below it is
    found again, and clusters other files ask for are still skipped."""
    simple(cluster=0).write(tmp_path / "image")
    cat = Catalogue()

    def add(name: str, requested: set[int] | None = None) -> int:
        entry = cat.add(MmvFile.open(str(tmp_path / "image"), name=name), requested)
        assert entry is not None
        return entry.cluster

    assert [add(f"f{k}") for k in range(5)] == [1, 2, 3, 4, 5]
    removed = cat.remove("f1")
    assert removed is not None
    removed.mf.close()
    assert add("g", {7}) == 6  # 2 is remembered as f1's; 7 is asked for by another file
    assert add("h") == 7
    assert add("f1") == 2  # f1 comes back to its own
    assert add("i") == 8


def test_holder_names_the_file_a_name_lost_to(tmp_path: Path, cat: Catalogue) -> None:
    """`check`'s conflicts: the served name itself, the leaf above it, a name below it,
    found through the name tree (it walked every served metric of every file: `check DIR`
    of 4,895 refused files took 33 s; found by a breaker run)."""
    cat.add(load(tmp_path, "a", simple(cluster=1, names=("x",), flags=layout.FLAG_NOPREFIX)))
    cat.add(load(tmp_path, "b", simple(cluster=2, names=("y.z",), flags=layout.FLAG_NOPREFIX)))
    assert cat.holder("mmv.x") == "a"  # the name
    assert cat.holder("mmv.x.deeper") == "a"  # a leaf above it
    assert cat.holder("mmv.y") == "b"  # names below it
    assert cat.holder("mmv.free") is None
    assert cat.holder("mmv.elsewhere", 2, 1) == "b"  # the file serving that PMID


def test_holder_of_a_shared_name_is_the_first_file_left(tmp_path: Path, cat: Catalogue) -> None:
    """Files sharing a cluster (same owner, same metric) serve one name; when the first goes
    the name is held by the next, in the order the files came."""
    for name in ("p1", "p2", "p3"):
        assert cat.add(
            load(tmp_path, name, simple(cluster=5, names=("m",), flags=layout.FLAG_NOPREFIX))
        )
    assert cat.holder("mmv.m") == "p1"
    cat.remove("p1")
    assert cat.holder("mmv.m.below") == "p2"
    cat.remove("p2")
    cat.remove("p3")
    assert cat.holder("mmv.m") is None


class CountedName(str):
    """A file name that counts its comparisons with other file names (all instances)."""

    compared = 0
    __hash__ = str.__hash__

    def __eq__(self, other: object) -> bool:
        CountedName.compared += 1
        return str.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        CountedName.compared += 1
        return str.__ne__(self, other)

    def __lt__(self, other: str) -> bool:
        CountedName.compared += 1
        return str.__lt__(self, other)


SHARED_FILES = 600
COMPARISONS_PER_FILE = 60  # file-name order kept by binary search: about log2(N) per index


def test_files_sharing_a_cluster_cost_no_work_per_pair(tmp_path: Path) -> None:
    """The processes of one application sharing a cluster (PCP QA 648): served, reloaded
    (identity remembered) and unserved, N files compare file names about log N times
    each (the catalogue's and the identity registry's indexes), never once per pair."""
    cat = Catalogue(registry=Registry())
    paths = hostile.shared_cluster(tmp_path, SHARED_FILES)
    CountedName.compared = 0
    for _ in range(2):  # the second pass: every name comes back to its remembered cluster
        opened = [MmvFile.open(str(p), name=CountedName(p.name)) for p in paths]
        entries = [cat.add(mf) for mf in opened]
        assert all(e is not None and e.cluster == 210 and e.metrics for e in entries)
        assert len(cat.instances(entries[0].metrics[0].indom.serial)) == SHARED_FILES
        for mf in opened:
            cat.remove(mf.name)
            mf.close()
    assert CountedName.compared <= COMPARISONS_PER_FILE * 2 * SHARED_FILES, CountedName.compared
