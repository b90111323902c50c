"""A family's descriptors kept in the identity registry (pmda_mmv/namespace/registrykept.py)
without pmcd: kept with its counts, read back, a family with counts served from them after a
restart with no member's file, a registry an older agent wrote (no descriptors) still read,
and the bound on what is kept."""

from __future__ import annotations

import json
from pathlib import Path

from pmda_mmv.mmvfile import layout
from pmda_mmv.mmvfile.reader import MmvFile
from pmda_mmv.namespace.registry import Registry
from pmda_mmv.namespace.registryfile import FAMILY
from pmda_mmv.namespace.registrykept import Kept, KeptIndom, KeptMetric, bounded
from tests.support.family import World, file_changes, member

FAMILY_KEY = ("websrv", 0, FAMILY)


def served(w: World) -> dict[str, tuple[object, ...]]:
    """Each family name's PMID, descriptor, help text and instances as served now."""
    out: dict[str, tuple[object, ...]] = {}
    for name, pmid in w.cat.leaf_pmid.items():
        if name.startswith("mmv.websrv."):
            sm = w.cat.sources[pmid][0]
            insts = [(i.internal, i.external) for i in sm.indom.indom.instances] if sm.indom else []
            serial = sm.indom.serial if sm.indom else None
            desc = (sm.type, sm.semantics, sm.units, serial, insts)
            out[name] = (pmid, desc, sm.oneline, sm.helptext)
    return out


def restarted(path: str, tmp_path: Path) -> World:
    """The agent started again on the registry at ``path``: no member's file served yet."""
    registry = Registry(path)
    registry.load()
    w = World(tmp_path, "websrv=websrv_*", registry)
    w.apply(file_changes())  # the first request: what the families serve
    return w


def departed(tmp_path: Path) -> tuple[World, str]:
    """A family whose one member counted 4 and 8 and left, its registry saved at a path."""
    path = str(tmp_path / "identity.json")
    w = World(tmp_path, "websrv=websrv_*", Registry(path))
    w.add("websrv_a", member((4, 8), busy=3))
    w.remove("websrv_a")
    assert w.registry.save()
    return w, path


def test_a_family_with_counts_is_served_after_a_restart_before_any_members_file(
    tmp_path: Path,
) -> None:
    w, path = departed(tmp_path)
    before = served(w)
    assert set(before) == {"mmv.websrv.requests", "mmv.websrv.busy"}
    w2 = restarted(path, tmp_path)
    assert served(w2) == before  # same PMIDs, descriptors, help text and instances
    assert w2.fetch("requests") == {0: 4, 1: 8}
    assert w2.fetch("busy") == {}  # an instant metric: live members only
    w3 = restarted(path, tmp_path)  # and again, still no member
    assert served(w3) == before and w3.fetch("requests") == {0: 4, 1: 8}
    # a member that disagrees with the kept descriptors is left out, as with live members
    w3.add("websrv_t", member((50, 50), busy_type=layout.TYPE_U64))
    assert w3.families.status("websrv_t") == (
        "websrv",
        "metric busy: type u64, the family's is u32 (as websrv_a)",
    )
    w3.add("websrv_b", member((1, 2), generation=0x5F5E1000000003))  # one that agrees joins
    assert w3.families.status("websrv_b") == ("websrv", "")
    assert served(w3) == before and w3.fetch("requests") == {0: 5, 1: 10}


def test_a_family_whose_first_counts_are_credited_at_start_is_served_from_what_is_kept(
    tmp_path: Path,
) -> None:
    """Its members were live when the agent stopped (nothing departed, nothing counted);
    their writers ended while it was down: the files left behind are credited at start, and
    the family is served from its kept descriptors with no member's file."""
    path = str(tmp_path / "identity.json")
    w = World(tmp_path, "websrv=websrv_*", Registry(path))
    w.add("websrv_a", member((4, 8)))
    before = served(w)
    assert w.registry.save()
    w2 = restarted(path, tmp_path)
    assert served(w2) == {}  # nothing counted yet
    left = MmvFile.open(str(tmp_path / "websrv_a"))
    with w2.families.lock:  # as the departures thread credits it
        assert w2.families.credit_departed(left, left.last_snapshot())
    w2.families.restore()  # the agent's thread, at its next request
    w2.apply(file_changes())
    assert served(w2) == before
    assert w2.fetch("requests") == {0: 4, 1: 8}


def test_the_registry_keeps_a_familys_descriptors_and_reads_them_back(tmp_path: Path) -> None:
    w, path = departed(tmp_path)
    registry = w.registry
    doc = json.loads(Path(path).read_text())
    [record] = [r for r in doc["names"] if r.get("kind") == FAMILY]
    assert record["descriptors"]["indoms"] == {"1": [[[0, "get"], [1, "post"]], None, None]}
    assert record["descriptors"]["metrics"]["requests"][:6] == [
        1,
        layout.TYPE_U64,
        layout.SEM_COUNTER,
        1 << 20,
        1,
        "websrv_a",
    ]
    again = Registry(path)
    again.load()
    record_again = again.get(FAMILY_KEY)
    original = registry.get(FAMILY_KEY)
    assert record_again is not None and original is not None
    assert record_again.kept == original.kept and record_again.totals == {"requests": {0: 4, 1: 8}}


def test_an_older_agents_registry_without_descriptors_is_read_and_keeps_its_counts(
    tmp_path: Path,
) -> None:
    path = tmp_path / "identity.json"
    old = {"name": "websrv", "uid": 0, "kind": FAMILY, "cluster": 7, "asked": 0}
    old |= {"noprefix": False, "indoms": {"1": 70001}, "totals": {"requests": {"0": 4}}}
    old |= {"credited": [["websrv_a", 1, 2]], "present": False}
    path.write_text(json.dumps({"version": 2, "epoch": "", "names": [old]}))
    w = restarted(str(path), tmp_path)
    record = w.registry.get(FAMILY_KEY)
    assert record is not None and not record.kept and record.totals == {"requests": {0: 4}}
    assert served(w) == {}  # nothing kept to serve it from: served when a member's file is
    w.add("websrv_b", member((1, 1), generation=0x5F5E1000000003))
    assert w.cat.leaf_pmid["mmv.websrv.requests"] == (7, 1)
    assert w.fetch("requests") == {0: 5, 1: 1}
    record = w.registry.get(FAMILY_KEY)
    assert record is not None and set(record.kept.metrics) == {"requests", "busy"}
    v1 = {"name": "family:websrv", "uid": 0, "cluster": 7, "asked": 0, "noprefix": False}
    path.write_text(json.dumps({"version": 1, "names": [v1 | {"totals": {"requests": {"0": 4}}}]}))
    w1 = restarted(str(path), tmp_path)
    record = w1.registry.get(FAMILY_KEY)
    assert record is not None and not record.kept and record.totals == {"requests": {0: 4}}


def test_what_is_kept_is_bounded_help_text_first() -> None:
    metrics = {
        f"m{n}": KeptMetric(n, layout.TYPE_U64, layout.SEM_COUNTER, 0, 1, "w", "x" * 200, None)
        for n in range(100)
    }
    insts = KeptIndom(tuple((i, f"instance{i}") for i in range(50)), "help")
    kept = Kept(metrics, {1: insts})
    assert bounded(kept, 1 << 20) == kept
    bare = bounded(kept, 8 << 10)
    assert bare.metrics.keys() == metrics.keys() and bare.indoms[1].instances == insts.instances
    assert all(m.oneline is None for m in bare.metrics.values()) and bare.indoms[1].oneline is None
    assert not bounded(kept, 1 << 10)
