"""The catalogue's indexes (served names, PMIDs, their sources, indom numbers) as its claim
and release methods keep them: any order of claims and releases leaves exactly what a model
of the claimed sources says, and nothing once every source is released."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from pmda_mmv.mmvfile import layout
from pmda_mmv.mmvfile.parsed import Indom, Instance, Metric
from pmda_mmv.namespace.catalogue import Catalogue
from pmda_mmv.namespace.served import ServedIndom, ServedMetric, Sources
from tests.support.family import World, member

FILES = ("a", "b", "c")
PMIDS = ((3, 1), (3, 2), (7, 1))  # (cluster, item), each served under one name
INDOMS = ((3, 1, 40), (3, 2, 41), (7, 1, 42))  # (cluster, file serial, PCP serial)


def metric_source(pmid: tuple[int, int], file: str) -> ServedMetric:
    cluster, item = pmid
    m = Metric(f"m{cluster}_{item}", item, layout.TYPE_U64, 1, 0, None, None, None, 0)
    sm = ServedMetric(f"mmv.{m.name}", cluster, item, m.type, m.semantics, 0, None, m)
    sm.file = file
    return sm


def indom_source(number: int, file: str) -> ServedIndom:
    return ServedIndom(number, Indom(1, 0, [Instance(1, file, 0)], None, None), file=file)


def check(cat: Catalogue, metrics: dict[tuple[int, int], list[str]]) -> None:
    """The metric indexes hold what the claimed sources (``metrics``) say, in file order."""
    claimed = {pmid: sorted(files) for pmid, files in metrics.items() if files}
    assert {pmid: [s.file for s in srcs] for pmid, srcs in cat.sources.items()} == claimed
    named = {f"mmv.m{c}_{i}": (c, i) for c, i in claimed}
    assert cat.leaf_pmid == named
    assert cat.leaves == set(named)
    for name, pmid in cat.leaf_pmid.items():
        assert {s.name for s in cat.sources[pmid]} == {name}


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.sampled_from(PMIDS), st.sampled_from(FILES))))
def test_metric_claims_and_releases_keep_names_pmids_and_sources_together(
    steps: list[tuple[bool, tuple[int, int], str]],
) -> None:
    cat = Catalogue()
    held: dict[tuple[tuple[int, int], str], ServedMetric] = {}
    for claim, pmid, file in steps:
        if claim and (pmid, file) not in held:
            held[(pmid, file)] = sm = metric_source(pmid, file)
            cat.claim_metric(sm)
        elif not claim and (pmid, file) in held:
            cat.release_metric(held.pop((pmid, file)))
        check(cat, {p: [f for q, f in held if q == p] for p in PMIDS})
    for sm in list(held.values()):
        cat.release_metric(sm)
    assert not (cat.sources or cat.leaf_pmid or cat.leaves or cat.tree)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.sampled_from(INDOMS), st.sampled_from(FILES))))
def test_indom_claims_free_a_number_with_its_last_source(
    steps: list[tuple[bool, tuple[int, int, int], str]],
) -> None:
    cat = Catalogue()
    held: dict[tuple[tuple[int, int, int], str], ServedIndom] = {}
    for claim, slot, file in steps:
        cluster, serial, number = slot
        if claim and (slot, file) not in held:
            held[(slot, file)] = si = indom_source(number, file)
            cat.claim_indom(cluster, serial, si)
        elif not claim and (slot, file) in held:
            freed = cat.release_indom(cluster, serial, held.pop((slot, file)))
            assert freed == all(s != slot for s, _ in held)
        sources = {s: sorted(f for t, f in held if t == s) for s, _ in held}
        assert cat.indom_keys == {(c, s): n for c, s, n in sources}
        assert {n: [si.file for si in srcs] for n, srcs in cat.indom_sources.items()} == {
            n: files for (_, _, n), files in sources.items()
        }
    for (slot, _), si in list(held.items()):
        cat.release_indom(slot[0], slot[1], si)
    assert not (cat.indom_keys or cat.indom_sources)


def test_a_family_releases_all_it_claimed_when_its_last_member_leaves(tmp_path: Path) -> None:
    w = World(tmp_path, "websrv=websrv_*")
    w.add("websrv_a", member((0, 0)))  # counted nothing: a family that counted stays served
    w.add("websrv_b", member((0, 0)))
    fam = w.families.families[0]
    pmid = w.cat.leaf_pmid["mmv.websrv.requests"]
    assert pmid[0] == fam.cluster and [s.file for s in w.cat.sources[pmid]] == ["websrv"]
    assert w.cat.indom_keys[(fam.cluster, 1)] == fam.indoms[1].serial
    w.remove("websrv_a")
    assert "mmv.websrv.requests" in w.cat.leaves  # a member is left
    w.remove("websrv_b")
    assert not (w.cat.sources or w.cat.leaf_pmid or w.cat.leaves)
    assert not (w.cat.indom_keys or w.cat.indom_sources or w.cat.clusters.held_by)
    assert "mmv.websrv" in w.cat.family_trees  # still reserved for the family


def test_sources_keep_one_file_as_its_record_and_files_sharing_a_key_in_name_order() -> None:
    """A PMID one file serves keeps that file's record itself (no list a name); files
    sharing it are read back in file-name order however they arrive and leave, and the key
    goes with its last file."""
    table: Sources[int, Any] = Sources()
    a, b, c = (SimpleNamespace(file=f) for f in "abc")
    table.link(1, b)
    assert table._by[1] is b and table[1] == [b]
    table.link(1, c)
    table.link(1, a)
    assert table[1] == [a, b, c] and list(table) == [1] and len(table) == 1
    assert table.unlink(1, b) and table[1] == [a, c]
    assert table.unlink(1, a) and table._by[1] is c
    assert table.unlink(1, a)  # not there: c still serves the key
    assert not table.unlink(1, c) and 1 not in table and table.get(1) is None
