"""The identity registry (pmda_mmv/namespace/registry.py) and the catalogue's use of it,
without pmcd:
assignment, never-reuse, who may share a cluster, eviction order, persistence and its
failures, and numbers another local user can neither predict nor take in a writer's restart."""

from __future__ import annotations

import io
import json
import os
import zlib
from pathlib import Path

import pytest

from pmda_mmv.agent.options import ServingOptions
from pmda_mmv.commands import check as check_cmd
from pmda_mmv.mmvfile import layout, limits
from pmda_mmv.mmvfile.reader import MmvFile
from pmda_mmv.namespace.catalogue import Catalogue
from pmda_mmv.namespace.indomnumbers import INDOM_MASK, derived_indom
from pmda_mmv.namespace.registry import Registry, default_path
from pmda_mmv.namespace.registryfile import VERSION, Record
from tests.support.mmvbuild import Indom, Instance, Metric, MmvBuilder, Value

STRANGER = 65534  # nobody


def build(
    cluster: int, names: tuple[str, ...] = ("a",), flags: int = 0, indom: int = 0
) -> MmvBuilder:
    b = MmvBuilder(cluster=cluster, flags=flags)
    if indom:
        b.indoms.append(Indom(indom, [Instance(0, "zero"), Instance(1, "one")]))
    for item, name in enumerate(names, 1):
        b.metrics.append(Metric(name, item, indom=indom or None))
        if indom:
            b.values += [Value(name, 0, item), Value(name, 1, item)]
        else:
            b.values.append(Value(name, None, item))
    return b


def load(tmp_path: Path, name: str, b: MmvBuilder, uid: int = 0) -> MmvFile:
    path = tmp_path / name
    b.write(path)
    os.chown(path, uid, uid)
    return MmvFile.open(str(path))


@pytest.fixture
def logged() -> list[str]:
    return []


@pytest.fixture
def cat(logged: list[str]) -> Catalogue:
    return Catalogue(log=logged.append, registry=Registry(log=logged.append))


def serve(cat: Catalogue, mf: MmvFile) -> int:
    entry = cat.add(mf)
    assert entry is not None
    return entry.cluster


def gone(cat: Catalogue, name: str) -> None:
    entry = cat.remove(name)
    assert entry is not None
    entry.mf.close()


# -- assignment and never-reuse -------------------------------------------------------------


def test_a_departed_names_cluster_goes_to_no_newcomer(
    tmp_path: Path, cat: Catalogue, logged: list[str]
) -> None:
    # pcp.mmv's default cluster 42: a PROCESS writer exits, the next one asks for 42
    assert serve(cat, load(tmp_path, "websrv_7205", build(42))) == 42
    gone(cat, "websrv_7205")
    newcomer = serve(cat, load(tmp_path, "websrv_8100", build(42)))
    assert newcomer != 42
    assert any(
        f"asked for cluster 42, held by websrv_7205 (departed): served as cluster {newcomer}"
        in line
        for line in logged
    )
    assert cat.files["websrv_8100"].identity.startswith("asked for cluster 42, held by")
    # the departed name comes back: its own cluster, whoever else asks for it
    assert serve(cat, load(tmp_path, "websrv_7205", build(42))) == 42


def test_a_returning_name_gets_its_own_cluster_back_whatever_the_order(tmp_path: Path) -> None:
    registry = Registry()
    first = Catalogue(registry=registry)
    order = ["zz", "aa", "mm"]
    got = {n: serve(first, load(tmp_path, n, build(0))) for n in order}
    got |= {n + "42": serve(first, load(tmp_path, n + "42", build(42))) for n in order}
    for name in list(first.files):
        gone(first, name)
    again = Catalogue(registry=registry)  # the agent restarted (same registry)
    for name in sorted(got, reverse=True):
        assert serve(again, load(tmp_path, name, build(0 if len(name) == 2 else 42))) == got[name]


def test_a_stranger_cannot_take_a_restarting_writers_cluster_or_indom(
    tmp_path: Path, cat: Catalogue
) -> None:
    # in the window while the victim's writer unlinks and recreates its file
    victim = serve(cat, load(tmp_path, "victim", build(60, indom=3)))
    serial = cat.files["victim"].indoms[3].serial
    gone(cat, "victim")
    stranger = cat.add(load(tmp_path, "attack", build(60, indom=3), uid=STRANGER))
    assert stranger is not None and stranger.cluster != victim
    assert stranger.indoms[3].serial != serial
    back = cat.add(load(tmp_path, "victim", build(60, indom=3)))
    assert back is not None and back.cluster == victim and back.indoms[3].serial == serial


def test_the_same_name_of_another_owner_is_another_identity(tmp_path: Path, cat: Catalogue) -> None:
    victim = serve(cat, load(tmp_path, "app", build(61)))
    gone(cat, "app")
    assert serve(cat, load(tmp_path, "app", build(61), uid=STRANGER)) != victim
    gone(cat, "app")
    assert serve(cat, load(tmp_path, "app", build(61))) == victim


def test_noprefix_processes_of_one_owner_rejoin_their_cluster(
    tmp_path: Path, cat: Catalogue
) -> None:
    # one application's processes (PCP QA 648): NOPREFIX files of one owner, one cluster
    np = layout.FLAG_NOPREFIX
    assert serve(cat, load(tmp_path, "app_1", build(70, ("app.x",), np, indom=2))) == 70
    assert serve(cat, load(tmp_path, "app_2", build(70, ("app.x",), np, indom=2))) == 70
    serial = cat.files["app_1"].indoms[2].serial
    gone(cat, "app_1")
    gone(cat, "app_2")
    third = cat.add(load(tmp_path, "app_3", build(70, ("app.x",), np, indom=2)))
    assert third is not None and third.cluster == 70 and third.indoms[2].serial == serial
    gone(cat, "app_3")
    # not a stranger's NOPREFIX file, nor a prefixed file of the same owner
    assert serve(cat, load(tmp_path, "evil", build(70, ("app.x",), np, indom=2), STRANGER)) != 70
    gone(cat, "evil")
    assert serve(cat, load(tmp_path, "other", build(70))) != 70


def test_pool_exhausted_evicts_the_longest_departed(
    tmp_path: Path, cat: Catalogue, logged: list[str]
) -> None:
    image = tmp_path / "image"
    build(0).write(image)

    def add(name: str) -> int:
        entry = cat.add(MmvFile.open(str(image), name=name))
        assert entry is not None
        return entry.cluster

    clusters = [add(f"f{k:04d}") for k in range(limits.MAX_CLUSTER)]
    assert sorted(clusters) == list(range(1, limits.MAX_CLUSTER + 1))
    for name in ("f0007", "f0003", "f0100"):  # departed in this order
        gone(cat, name)
    assert add("new1") == clusters[7]  # the longest departed first
    assert add("new2") == clusters[3]
    assert any("every cluster is served or remembered: cluster 8 of f0007" in x for x in logged)
    assert cat.registry.evictions and cat.registry.get(("f0007", 0)) is None
    note = "cluster 8 was f0007's (departed longest): every cluster was held"
    assert cat.files["new1"].identity == note  # the status metric's text
    assert json.dumps(note) in cat.registry.text()  # kept: check shows it later


def test_check_reads_the_registry_and_explains_numbers(tmp_path: Path) -> None:
    # check takes the agent's --registry, read only: a file's reassignment (and an
    # eviction noted when it was numbered) is explained with the file that held the number
    d = tmp_path / "mmv"
    d.mkdir()
    build(42).write(d / "websrv_8100")
    build(0).write(d / "new1")
    reg = tmp_path / "reg.json"
    registry = Registry(str(reg))
    registry.serve(("websrv_7205", 0), 42, 42, False, {})
    registry.depart(("websrv_7205", 0))
    registry.serve(("new1", 0), 8, 0, False, {}, "cluster 8 was f0007's (departed longest)")
    registry.depart(("new1", 0))
    assert registry.save()
    before = reg.read_bytes()
    out = io.StringIO()
    check_cmd.check([str(d)], False, out, ServingOptions(registry=str(reg)))
    text = out.getvalue()
    assert "cluster: asked for cluster 42, held by websrv_7205 (departed): served as" in text
    assert "cluster: cluster 8 was f0007's (departed longest)" in text
    assert reg.read_bytes() == before  # read only
    out = io.StringIO()
    check_cmd.check([str(d / "websrv_8100")], False, out)  # no registry: nothing held
    assert out.getvalue().split("/")[-1] == "websrv_8100: ok\n"


# -- the registry alone -----------------------------------------------------------------------


def test_cap_forgets_the_longest_departed_first() -> None:
    logged: list[str] = []
    r = Registry(cap=8, log=logged.append)
    r.serve(("stays", 0), 1, 0, False, {})
    for n in range(40):
        r.serve((f"gone{n}", 0), n + 2, 0, False, {n: n + 100})
        r.depart((f"gone{n}", 0))
    names = {name for name, _ in r.records}
    assert len(names) <= 8 * 9 // 8 + 1
    assert "stays" in names and "gone39" in names and "gone0" not in names
    assert not r.cluster_held(2) and not r.serial_held(100)  # forgotten numbers are free
    assert r.cluster_held(41) and r.serial_held(139)
    assert len(logged) == 1 and "more than 8 names remembered" in logged[0]  # once
    assert r.evicted == 40 - 8


def test_save_and_load_round_trip(tmp_path: Path) -> None:
    path = str(tmp_path / "reg.json")
    r = Registry(path)
    r.serve(("a", 0), 5, 5, False, {1: 10241, 2: 777})
    r.serve(("b\udcff", 1000), 6, 42, True, {})  # a name that is not UTF-8
    r.depart(("a", 0))
    assert r.save() and not r.dirty
    doc = json.loads(Path(path).read_text())
    assert doc["version"] == VERSION and [n["name"] for n in doc["names"]] == ["b\udcff", "a"]
    again = Registry(path)
    again.load()
    assert again.records == {
        ("b\udcff", 1000): Record(6, 42, True, {}),
        ("a", 0): Record(5, 5, False, {1: 10241, 2: 777}),
    }
    assert again.present == set()  # nothing is served until a scan serves it
    assert again.cluster_held(5) and again.serial_held(777)
    assert not list(tmp_path.glob("*.tmp"))


@pytest.mark.parametrize(
    "text",
    [
        "",
        '{"version": 1, "names": [{"name": "a", "uid": 0, "clu',  # truncated
        "\x00garbage\xff",
        '{"version": 99, "names": []}',
        '{"version": 1, "names": [{"name": "a", "uid": 0, "cluster": 99999}]}',
        '{"version": 1, "names": {"a": 1}}',
        "[1, 2]",
    ],
)
def test_an_unusable_file_is_logged_once_and_rebuilt(tmp_path: Path, text: str) -> None:
    path = tmp_path / "reg.json"
    path.write_text(text, errors="surrogateescape")
    logged: list[str] = []
    r = Registry(str(path), log=logged.append)
    r.load()
    assert r.records == {} and len(logged) == 1 and "starting empty" in logged[0]
    r.serve(("a", 0), 3, 0, False, {})
    assert r.save()
    again = Registry(str(path))
    again.load()
    assert again.records == {("a", 0): Record(3, 0, False, {})}


def test_a_missing_file_is_an_empty_registry(tmp_path: Path) -> None:
    logged: list[str] = []
    r = Registry(str(tmp_path / "none.json"), log=logged.append)
    r.load()
    assert r.records == {} and logged == []


def test_an_unwritable_directory_is_logged_once_and_numbers_kept(tmp_path: Path) -> None:
    logged: list[str] = []
    r = Registry(str(tmp_path / "missing" / "reg.json"), log=logged.append)
    for n in range(3):
        r.serve((f"f{n}", 0), n + 1, 0, False, {})
        assert not r.save()
    assert len(logged) == 1 and "cannot save" in logged[0]
    assert r.cluster_held(3)
    (tmp_path / "missing").mkdir()
    r.serve(("f9", 0), 9, 0, False, {})
    assert r.save() and "saved again" in logged[-1]


def test_readonly_and_memory_registries_write_nothing(tmp_path: Path) -> None:
    path = tmp_path / "reg.json"
    r = Registry(str(path), readonly=True)
    r.serve(("a", 0), 1, 0, False, {})
    assert r.save() and not path.exists()
    assert Registry().save()


def test_default_path_is_under_pcp_var_dir() -> None:
    assert default_path("/var/lib/pcp", 70) == "/var/lib/pcp/config/pmda/70.mmv-identity.json"


def test_only_new_numbers_make_a_save(tmp_path: Path, cat: Catalogue) -> None:
    # a writer rewriting its file (a new generation) is reloaded under its own numbers:
    # no save, so reloads and departures cost no fsync inside the request
    assert serve(cat, load(tmp_path, "app", build(5, indom=2))) == 5
    assert cat.registry.dirty and cat.registry.save()
    gone(cat, "app")
    assert serve(cat, load(tmp_path, "app", build(5, indom=2))) == 5
    assert not cat.registry.dirty
    serve(cat, load(tmp_path, "other", build(0)))
    assert cat.registry.dirty


def test_newcomers_past_many_departed_clusters_cost_no_rescan(tmp_path: Path) -> None:
    # N departed names hold clusters 1..N: each newcomer's search starts past them (it
    # started at the lowest unserved cluster: N newcomers cost N^2 / 2 steps), and a
    # cluster the registry frees is found again
    image = tmp_path / "image"
    build(0).write(image)
    cat = Catalogue(registry=Registry(cap=5000))

    def add(name: str) -> int:
        entry = cat.add(MmvFile.open(str(image), name=name))
        assert entry is not None
        return entry.cluster

    for k in range(2000):
        add(f"old{k}")
    for k in range(2000):
        gone(cat, f"old{k}")
    calls = 0
    held = cat.registry.cluster_held

    def counted(cluster: int, key: object = None) -> bool:
        nonlocal calls
        calls += 1
        return held(cluster)

    cat.registry.cluster_held = counted  # type: ignore[method-assign]
    assert [add(f"new{k}") for k in range(100)] == list(range(2001, 2101))
    assert calls < 2000 + 100 * 3
    cat.registry.forget(("old5", 0))
    assert add("after") == 6


def test_one_user_cycling_names_forgets_its_own_not_another_users() -> None:
    # A user who cycles names (a file per PID, or on purpose) pushed every other user's
    # departed names out past the cap: their clusters were free again and given to the
    # next newcomer, so a returning victim's PMIDs were another user's.  The owner holding
    # the most names now forgets first.
    r = Registry(cap=8)
    r.serve(("victim", 0), 60, 60, False, {1: 500})
    r.depart(("victim", 0))
    for n in range(40):
        r.serve((f"churn{n}", STRANGER), n + 100, 0, False, {})
        r.depart((f"churn{n}", STRANGER))
    assert r.get(("victim", 0)) is not None
    assert r.cluster_held(60) and r.serial_held(500)
    assert r.get((f"churn{0}", STRANGER)) is None and r.get(("churn39", STRANGER)) is not None


def test_pool_exhausted_evicts_the_busiest_owners_longest_departed() -> None:
    # every cluster held: the stranger's 4,094 departed names go before the victim's one
    r = Registry()
    r.serve(("victim", 0), 1, 1, False, {})
    r.depart(("victim", 0))
    for c in range(2, limits.MAX_CLUSTER + 1):
        r.serve((f"s{c}", STRANGER), c, 0, False, {})
        r.depart((f"s{c}", STRANGER))
    evicted = r.evict_cluster(lambda c: True)
    assert evicted == (2, [("s2", STRANGER)])
    assert r.get(("victim", 0)) is not None


def test_save_never_writes_through_a_planted_temporary_name(tmp_path: Path) -> None:
    # The temporary file's name is predictable ({path}.{pid}.tmp): one planted as a symlink
    # (a --registry in a directory others may write) was opened with O_TRUNC and followed,
    # so the save overwrote the symlink's target.  It is now created O_EXCL | O_NOFOLLOW,
    # a name left there removed first (a save killed at the same PID leaves one too).
    path = tmp_path / "reg.json"
    target = tmp_path / "precious"
    target.write_text("keep me\n")
    os.symlink(target, f"{path}.{os.getpid()}.tmp")
    r = Registry(str(path))
    r.serve(("a", 0), 5, 5, False, {})
    assert r.save()
    assert target.read_text() == "keep me\n"
    assert json.loads(path.read_text())["names"][0]["name"] == "a"
    assert not os.path.lexists(f"{path}.{os.getpid()}.tmp")


def test_load_keeps_only_the_newest_names_the_cap_allows(tmp_path: Path) -> None:
    # A registry file far past the cap (hand-edited, or written with a larger
    # --registry-cap) was checked and indexed whole before the agent answered pmcd: 250,000
    # names (51 MiB) took 9.2 s to load and 3.4 s more at the first change (the trim),
    # beyond pmcd's 5 s.  Only the newest cap + cap/8 are read (1.7 s, then 0.01 s).
    path = tmp_path / "reg.json"
    big = Registry(str(path))
    for n in range(100):
        big.serve((f"n{n}", 0), n + 1, 0, False, {1: n + 10})
        big.depart((f"n{n}", 0))
    assert big.save()
    small = Registry(str(path), cap=8)
    small.load()
    assert [name for name, _ in small.records] == [f"n{n}" for n in range(91, 100)]
    assert not small.cluster_held(1) and small.cluster_held(100) and small.serial_held(109)


def test_the_derived_number_secret_is_kept_beside_the_registry_for_its_user_only(
    tmp_path: Path,
) -> None:
    # an indom's search for a number of its own must not start at an unkeyed CRC-32 of
    # its file name and serial, which any local user could compute and fill in advance
    path = tmp_path / "reg.json"
    r = Registry(str(path))
    r.load()
    r.serve(("a", 0), 1, 0, False, {})
    assert r.save()
    key = tmp_path / "reg.json.key"
    assert key.stat().st_mode & 0o777 == 0o600 and bytes.fromhex(key.read_text()) == r.secret
    again = Registry(str(path))
    again.load()
    assert again.secret == r.secret  # the same searches after an agent restart
    assert Registry().secret != Registry().secret  # memory only: one per process
    other = Registry(str(tmp_path / "other.json"), readonly=True)
    other.load()
    other.serve(("a", 0), 1, 0, False, {})
    assert other.save() and not list(tmp_path.glob("other*"))  # check writes no secret
    start = derived_indom("victim", 5, r.secret)
    assert start != zlib.crc32(b"victim\x005") % INDOM_MASK + 1
    assert derived_indom("victim", 5, again.secret) == start
    assert derived_indom("victim", 5, Registry().secret) != start
