"""The identity registry's bounds (pmda_mmv/namespace/registry.py, registryfile.py,
registryjournal.py) without pmcd: bytes as well as names, a bounded cost per long spilled
name, a save that costs what changed, a file past the read limit loaded from its end,
family keys no file name can forge, and eviction by departed names only."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from pmda_mmv.mmvfile import layout
from pmda_mmv.namespace.registry import BYTES_PER_NAME, Registry
from pmda_mmv.namespace.registryfile import FAMILY, MAX_BYTES, Record
from pmda_mmv.namespace.registryjournal import WHOLE
from tests.support.family import World, member
from tests.support.mmvbuild import MmvBuilder

STRANGER = 65534  # nobody
VICTIM = 1000


def long_names(tag: str, n: int) -> dict[str, tuple[int, int]]:
    """``n`` spilled metric names of 245 characters, all at item 0 of the file (the PMIDs
    the spill clusters gave them)."""
    return {f"{tag}_{k:05d}_".ljust(245, "x"): (100 + k // 1024, k % 1024) for k in range(n)}


def test_long_spilled_names_cost_a_bounded_amount_and_keep_their_pmids(tmp_path: Path) -> None:
    # 4,096 spilled names of 245 characters cost a record 1.1 MB: 32 such files written
    # twice under new names made the file 68.6 MB, past the read limit
    path = str(tmp_path / "reg.json")
    r = Registry(path)
    r.load()
    spills = long_names("m", 4096)
    r.serve(("big", STRANGER), 7, 0, True, {}, "", spills)
    assert r.bytes < 4096 * 64
    assert r.save()
    again = Registry(path)
    again.load()
    assert again.spills(("big", STRANGER), sorted(spills)) == spills  # the same PMIDs


def test_one_users_long_names_never_push_the_registry_past_its_bytes(tmp_path: Path) -> None:
    path = str(tmp_path / "reg.json")
    r = Registry(path, cap=50)
    r.load()
    r.serve(("victim", VICTIM), 3, 3, False, {5: 6149})
    r.depart(("victim", VICTIM))
    for gen in range(2):  # every file written again under a new name
        for k in range(32):
            r.serve((f"g{gen}_{k}", STRANGER), 10 + k, 0, True, {}, "", long_names("m", 256))
            assert r.save()
        for k in range(32):
            r.depart((f"g{gen}_{k}", STRANGER))
    # the stranger's served files are past its quota: it forgot every departed name of its own
    assert not [k for k in r.records if k[0].startswith("g0_")]
    assert r.byte_cap == 50 * BYTES_PER_NAME and r.get(("victim", VICTIM)) is not None
    again = Registry(path, cap=50)
    again.load()
    assert again.get(("victim", VICTIM)) == Record(3, 3, False, {5: 6149})
    assert not again.problem


@pytest.mark.serial
def test_a_save_costs_what_changed_not_what_is_remembered(tmp_path: Path) -> None:
    path = tmp_path / "reg.json"
    r = Registry(str(path), cap=100_000)
    r.load()
    for k in range(20_000):
        r.serve((f"old{k}", 0), k % 4000 + 1, 0, False, {1: k + 10})
        r.depart((f"old{k}", 0))
    assert r.save()  # the first save writes the file whole
    whole = path.stat().st_size
    times = []
    for k in range(200):
        r.serve((f"new{k}", 0), k + 1, 0, False, {})
        t = time.perf_counter()
        assert r.save()
        times.append(time.perf_counter() - t)
    assert path.stat().st_size == whole  # appended to the journal
    journal = Path(f"{path}.journal").read_text().splitlines()
    assert len(journal) == 1 + 200 and json.loads(journal[-1])["name"] == "new199"
    assert sorted(times)[100] < 0.02
    again = Registry(str(path), cap=100_000)
    again.load()
    assert len(again.records) == 20_200 and again.get(("new199", 0)) == Record(200, 0, False)


def journaled(path: Path) -> Registry:
    """A registry saved through its journal (departed names enough), ``a`` in cluster 1."""
    r = Registry(str(path))
    r.load()
    for k in range(1000):
        r.serve((f"old{k}", 0), 4000, 0, False, {})
        r.depart((f"old{k}", 0))
    assert r.bytes > WHOLE
    r.serve(("a", 0), 1, 0, False, {})
    assert r.save()
    return r


def test_a_journal_line_cut_short_by_a_power_cut_is_cut_off(tmp_path: Path) -> None:
    path = tmp_path / "reg.json"
    r = journaled(path)
    r.serve(("b", 0), 2, 0, False, {})
    assert r.save()
    journal = Path(f"{path}.journal")
    with journal.open("a") as f:
        f.write('{"name": "c", "uid": 0, "clu')  # the save of c never finished
    again = Registry(str(path))
    again.load()
    assert {("a", 0), ("b", 0)} <= set(again.records) and ("c", 0) not in again.records
    assert not again.problem
    again.serve(("d", 0), 4, 0, False, {})
    assert again.save()
    third = Registry(str(path))
    third.load()
    assert {("a", 0), ("b", 0), ("d", 0)} <= set(third.records) and len(third.records) == 1003


def test_a_stale_journal_is_not_read(tmp_path: Path) -> None:
    # the file written whole, the agent killed before the new journal replaced the old one
    path = tmp_path / "reg.json"
    r = journaled(path)
    r.serve(("a", 0), 2, 0, False, {})  # a (forgotten and) renumbered since
    assert r.save()
    stale = Path(f"{path}.journal").read_text()
    r._journal.close()
    r.serve(("z", 0), 9, 0, False, {})
    assert r.save()  # whole: a new epoch
    Path(f"{path}.journal").write_text(stale)
    again = Registry(str(path))
    again.load()
    assert again.get(("a", 0)) == Record(2, 0, False) and again.get(("z", 0)) is not None


@pytest.mark.serial
def test_a_file_past_the_read_limit_loads_its_newest_names(tmp_path: Path) -> None:
    # the file the stranger's long names made (version 1, one record a line): it was
    # refused whole ("larger than 64 MiB; starting empty"), every user's numbers gone
    path = tmp_path / "reg.json"
    line = json.dumps(
        {
            "name": "x",
            "uid": STRANGER,
            "cluster": 9,
            "asked": 0,
            "noprefix": True,
            "indoms": {},
            "spills": {n: list(ci) for n, ci in long_names("m", 4096).items()},
            "present": False,
        }
    )
    victim = json.dumps(
        {
            "name": "victim",
            "uid": VICTIM,
            "cluster": 3,
            "asked": 3,
            "noprefix": False,
            "indoms": {"5": 6149},
            "present": False,
        }
    )
    copies = MAX_BYTES // len(line) + 2
    with path.open("w") as f:
        f.write('{"version": 1, "names": [\n')
        for k in range(copies):
            f.write(line.replace('"name": "x"', f'"name": "x{k}"') + ",\n")
        f.write(victim + "\n]}\n")
    assert path.stat().st_size > MAX_BYTES
    logged: list[str] = []
    r = Registry(str(path), log=logged.append)
    t = time.perf_counter()
    r.load()
    assert time.perf_counter() - t < 5
    assert r.get(("victim", VICTIM)) == Record(3, 3, False, {5: 6149})
    assert r.cluster_held(3) and r.serial_held(6149)
    assert "newest" in logged[0]
    assert r.save() and path.stat().st_size < MAX_BYTES // 4  # rewritten bounded


def test_a_file_named_like_a_family_never_takes_the_familys_record(tmp_path: Path) -> None:
    # a NOPREFIX file named family:websrv had the family's registry key: after an agent
    # restart the family took its owner (and cluster) from the stranger's record
    path = str(tmp_path / "identity.json")
    registry = Registry(path)
    registry.load()
    w = World(tmp_path, "websrv=websrv_*", registry)
    w.add("websrv_a", member((4, 8)), uid=VICTIM)
    fam = w.families.families[0]
    pmid = w.cat.leaf_pmid["mmv.websrv.requests"]
    b = MmvBuilder(cluster=0, flags=layout.FLAG_NOPREFIX)
    w.add("family:websrv", b, uid=STRANGER)
    assert w.cat.files["family:websrv"].cluster != fam.cluster
    assert registry.get(("websrv", VICTIM, FAMILY)) is not None
    assert registry.get(("family:websrv", STRANGER)) is not None
    w.remove("websrv_a")  # its counts are the family's departed counts
    assert registry.save()
    again = Registry(path)
    again.load()
    w2 = World(tmp_path, "websrv=websrv_*", again)
    assert w2.families.families[0].owner == VICTIM
    w2.add("family:websrv", b, uid=STRANGER)  # back first, and newest
    w2.add("websrv_a", member((1, 1), generation=0x5F5E1000000003), uid=VICTIM)
    assert w2.families.families[0].owner == VICTIM
    assert w2.cat.leaf_pmid["mmv.websrv.requests"] == pmid
    assert w2.fetch("requests") == {0: 5, 1: 9}


def test_old_family_records_are_converted_and_a_forged_one_stays_a_files(tmp_path: Path) -> None:
    path = tmp_path / "reg.json"
    names = [
        {"name": "family:websrv", "uid": VICTIM, "cluster": 1, "asked": 0, "noprefix": False},
        {"name": "family:websrv", "uid": STRANGER, "cluster": 3, "asked": 0, "noprefix": True},
    ]
    path.write_text(json.dumps({"version": 1, "names": names}))
    r = Registry(str(path))
    r.load()
    assert set(r.records) == {("websrv", VICTIM, FAMILY), ("family:websrv", STRANGER)}
    assert r.save()
    doc = json.loads(path.read_text())
    assert doc["version"] == 2 and doc["names"][0]["kind"] == FAMILY
    again = Registry(str(path))
    again.load()
    assert set(again.records) == set(r.records)


def test_eviction_ranks_owners_by_departed_names_only() -> None:
    # the victim's 6 served files counted against it: its one departed name was forgotten
    # before a stranger's cycling names, and the stranger's next file took its cluster
    r = Registry(cap=8)
    for k in range(6):
        r.serve((f"served{k}", VICTIM), 10 + k, 0, False, {})
    r.serve(("departed", VICTIM), 60, 60, False, {1: 500})
    r.depart(("departed", VICTIM))
    for n in range(40):
        r.serve((f"churn{n}", STRANGER), 100 + n, 0, False, {})
        r.depart((f"churn{n}", STRANGER))
    assert r.get(("departed", VICTIM)) == Record(60, 60, False, {1: 500})
    assert r.cluster_held(60) and r.serial_held(500)
    assert len([k for k in r.records if k[1] == STRANGER]) <= 8 * 9 // 8  # its quota


def test_a_save_through_the_journal_still_writes_a_missing_secret(tmp_path: Path) -> None:
    path = tmp_path / "reg.json"
    journaled(path)
    key = tmp_path / "reg.json.key"
    key.unlink()
    again = Registry(str(path))
    again.load()
    again.serve(("b", 0), 2, 0, False, {})
    assert again.save()
    assert bytes.fromhex(key.read_text()) == again.secret  # before its numbers are served


def test_a_journal_that_is_no_regular_file_costs_the_registry_nothing(tmp_path: Path) -> None:
    path = tmp_path / "reg.json"
    journaled(path)
    journal = Path(f"{path}.journal")
    journal.unlink()
    os.mkfifo(journal)  # would block the agent's start for ever, if opened so
    again = Registry(str(path))
    again.load()
    assert again.get(("a", 0)) == Record(1, 0, False) and not again.problem
    again.serve(("b", 0), 2, 0, False, {})
    assert again.save() and journal.is_file()  # written whole, a new journal after it
