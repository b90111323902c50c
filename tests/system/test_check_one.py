"""``check FILE``: the verdict on one file of a directory, judged with only the files beside
it that can change it (:mod:`pmda_mmv.commands.checkscope`), is the verdict ``check DIR``
gives it, which is the agent's (tests/system/test_check.py compares those under a private
pmcd).  And the work it costs is counted: the files fully read and validated."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from pmda_mmv.agent.assembly import RegistryChoice, assemble
from pmda_mmv.agent.options import ServingOptions
from pmda_mmv.commands import check as check_cmd
from pmda_mmv.commands.checkscope import scope
from pmda_mmv.mmvfile import layout, reader
from pmda_mmv.namespace.registry import Registry
from tests.support import hostile
from tests.support.crafted import crafted
from tests.support.mmvbuild import Metric, MmvBuilder, Value, sample

OPTIONS = ServingOptions(owners=(os.getuid(),), registry="none")


def _single(
    name: str, *, cluster: int, item: int = 1, flags: int = 0, version: int = 1
) -> MmvBuilder:
    b = MmvBuilder(cluster=cluster, flags=flags, version=version)
    b.metrics.append(Metric(name, item, layout.TYPE_U32))
    b.values.append(Value(name, None, 3))
    return b


def _alone_as_in_directory(d: Path, options: ServingOptions = OPTIONS) -> int:
    """Assert each entry's ``check FILE`` verdict is its ``check DIR`` one; returns how
    many entries were judged with part of the directory only."""
    whole = {r["file"]: r for r in check_cmd.judge([str(d)], options)}
    registry = Registry()
    scoped = 0
    for name in sorted(os.listdir(d)):
        path = str(d / name)
        if os.path.isdir(path):  # judged as a directory: every entry of it
            continue
        [alone] = check_cmd.judge([path], options)
        assert alone == whole[path], name
        only = scope(str(d), name, options, registry)
        scoped += only is not None and len(only) < len(whole)
    return scoped


def test_every_crafted_file_alone_as_in_its_directory(tmp_path: Path) -> None:
    """The crafted corpus of test_check (every state, conflicts, symlinks, hostile
    shapes): each file's verdict alone is its verdict in the directory."""
    crafted(tmp_path)
    assert _alone_as_in_directory(tmp_path) > 10


def test_siblings_that_meet_and_that_do_not(tmp_path: Path) -> None:
    """Files that meet the judged one by a name (a NOPREFIX metric below its name, v1 and
    v2; a file name sharing its first component), by a cluster (asked for by an earlier
    file, shared by items; through a chain of files), or by an inode (a hard link), and
    files that meet nothing (``far``, and a symlink to it): alone as in the directory, and
    the scope holds exactly those that meet."""
    _single("m", cluster=40).write(tmp_path / "b")  # judged: mmv.b.m, cluster 40
    _single("b.x", cluster=41, flags=layout.FLAG_NOPREFIX).write(tmp_path / "a1")
    _single("b", cluster=42, flags=layout.FLAG_NOPREFIX, version=2).write(tmp_path / "a2")
    _single("m", cluster=43).write(tmp_path / "b.m")  # mmv.b.m.m: below mmv.b.m
    _single("n", cluster=40).write(tmp_path / "a3")  # asks cluster 40 first, same item
    _single("n", cluster=44, item=2).write(tmp_path / "c1")
    _single("n", cluster=44, item=3).write(tmp_path / "c2")  # meets c1 only: not b
    _single("n", cluster=41, item=2).write(tmp_path / "d1")  # cluster of a1, which meets b
    os.link(tmp_path / "b", tmp_path / "b_link")
    sample().write(tmp_path / "far")
    (tmp_path / "far_sym").symlink_to("far")  # outlined as far: meets far only
    assert _alone_as_in_directory(tmp_path) > 0
    only = scope(str(tmp_path), "c2", OPTIONS, Registry())
    assert only == {"c1", "c2"}
    os.unlink(tmp_path / "b_link")
    only = scope(str(tmp_path), "b", OPTIONS, Registry())
    assert only == {"b", "a1", "a2", "b.m", "a3", "d1"}
    assert scope(str(tmp_path), "far", OPTIONS, Registry()) == {"far", "far_sym"}


def test_a_sibling_reached_through_a_version_2_name(tmp_path: Path) -> None:
    """A NOPREFIX version 2 file asking for the judged file's cluster, whose metric ``a``
    is a non-leaf of the prefixed file ``a``'s names: ``a`` refuses it, and the judged
    file's verdict follows (the names of a version 2 file are in its strings)."""
    _single("m", cluster=9).write(tmp_path / "a")
    _single("a", cluster=5, flags=layout.FLAG_NOPREFIX, version=2).write(tmp_path / "b")
    _single("c", cluster=5, item=3).write(tmp_path / "f")
    _single("c", cluster=60).write(tmp_path / "z")
    assert scope(str(tmp_path), "f", OPTIONS, Registry()) == {"a", "b", "f"}
    assert _alone_as_in_directory(tmp_path) > 0


def _random_directory(rng: random.Random, d: Path, files: int) -> None:
    """``files`` small files meeting one another at random: few clusters, names and items
    (cluster 0, NOPREFIX, version 2, spilled items, a reserved name, a hard link, a
    symlink)."""
    for k in range(files):
        flags = layout.FLAG_NOPREFIX if rng.random() < 0.4 else 0
        cluster = rng.choice([0, 5, 5, 6, 7, 8, 9, rng.randint(1, 4095)])
        b = MmvBuilder(cluster=cluster, flags=flags, version=rng.choice([1, 2]))
        for j in range(rng.randint(1, 3)):
            name = rng.choice(["a", "b", "a.x", "b.y", "c", f"m{j}", "f1", "f1.z", "control.q"])
            if all(m.name != name for m in b.metrics):
                b.metrics.append(Metric(name, rng.choice([1, 2, 3, 1500, j + 1]), layout.TYPE_U32))
                b.values.append(Value(name, None, 3))
        path = d / (rng.choice(["f1", "f2", "a", "b", "f1.z", "g"]) + rng.choice(["", str(k)]))
        if not path.exists():
            b.write(path)
    first, last = sorted(os.listdir(d))[0], sorted(os.listdir(d))[-1]
    if rng.random() < 0.3 and not os.path.lexists(d / f"z{first}"):
        os.link(d / first, d / f"z{first}")
    if rng.random() < 0.3 and not os.path.lexists(d / f"s{last}"):
        (d / f"s{last}").symlink_to(last)


@pytest.mark.parametrize("seed", range(30))
def test_random_directories_alone_as_in_the_directory(tmp_path: Path, seed: int) -> None:
    """Directories of files meeting one another at random, half of them with the registry
    an agent wrote before some files left and others came: every file alone as in its
    directory."""
    rng = random.Random(seed)
    d = tmp_path / "mmv"
    d.mkdir()
    _random_directory(rng, d, rng.randint(3, 25))
    options = OPTIONS
    if seed % 2:
        path = tmp_path / "registry.json"
        agent = ServingOptions(registry=str(path))
        built = assemble(agent, str(d), RegistryChoice(str(tmp_path)))
        built.scanner.refresh(force=True)
        built.registry.save()
        for name in sorted(os.listdir(d)):
            if rng.random() < 0.3:
                os.unlink(d / name)
        _random_directory(rng, d, rng.randint(1, 10))
        options = ServingOptions(owners=(os.getuid(),), registry=str(path))
    _alone_as_in_directory(d, options)


def test_the_agents_registry_is_followed(tmp_path: Path) -> None:
    """With the registry an agent wrote: a file remembered under another cluster than the
    one its header asks for meets the files of both."""
    d = tmp_path / "mmv"
    d.mkdir()
    _single("m", cluster=50).write(d / "a")
    _single("m", cluster=50, item=1).write(d / "b")  # moved: a holds 50 at item 1
    _single("m", cluster=60).write(d / "far")
    path = tmp_path / "registry.json"
    built = assemble(ServingOptions(registry=str(path)), str(d), RegistryChoice(str(tmp_path)))
    built.scanner.refresh(force=True)
    built.registry.save()
    moved = built.catalogue.files["b"].cluster
    (d / "a").unlink()
    _single("m", cluster=moved, item=7).write(d / "c")  # asks for b's remembered cluster
    options = ServingOptions(owners=(os.getuid(),), registry=str(path))
    assert _alone_as_in_directory(d, options) > 0
    registry = Registry(str(path), readonly=True)
    registry.load()
    assert scope(str(d), "b", options, registry) == {"b", "c"}


def test_check_one_file_reads_the_others_outlines_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The work of ``check FILE`` on one of 600 plain files, 20 to a cluster: the files
    sharing its cluster are validated (20), the others' outlines only are read."""
    files = hostile.many_files(tmp_path, 600, per_cluster=20)
    parsed: list[str] = []
    parse = reader.parse

    def counted(data: bytes, path: str) -> object:
        parsed.append(path)
        return parse(data, path)

    monkeypatch.setattr(reader, "parse", counted)
    [result] = check_cmd.judge([str(files[0])], OPTIONS)
    assert result["status"] == "ok"
    assert len(parsed) <= 20, len(parsed)
