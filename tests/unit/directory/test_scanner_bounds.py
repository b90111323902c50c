"""The scanner's bounds without pmcd (pmda_mmv.directory.scanner, fdlimit): the queue of
changed names, reloads only when a file really changed, descriptors held by served files,
``--max-names``, and the memory one served name costs."""

from __future__ import annotations

import os
import struct
from pathlib import Path

from pmda_mmv.agent.options import parse_args
from pmda_mmv.directory import fdlimit
from pmda_mmv.directory.resources import Limits
from pmda_mmv.directory.scanner import Scanner
from pmda_mmv.namespace.catalogue import Catalogue
from tests.support import hostile, mmvbuild
from tests.support.mmvbuild import new_generation
from tests.support.traced import traced_scan


def test_queued_changes_are_bounded(tmp_path: Path) -> None:
    """Marks for more names than the queue holds become one rescan of the directory."""
    scanner = Scanner(str(tmp_path), Catalogue())
    scanner.refresh()
    rescans = scanner.rescans
    for k in range(100_000):
        scanner.mark_dirty(f"gone{k}")
    scanner.refresh()
    assert scanner.rescans == rescans + 1


def test_a_served_file_whose_writer_only_writes_values_is_not_reloaded(tmp_path: Path) -> None:
    """A served file's mtime moves at every write through its writer's
    mapping; a listing (any other file's churn) then found its stat changed and loaded it
    again, unserving and serving it anew.  Same inode, size and generation: the entry,
    its tables and its values stay as they are."""
    scanner = Scanner(str(tmp_path), Catalogue(), check_interval=0)
    path = tmp_path / "permanent"
    image = mmvbuild.single(9, 1).write(path)
    changes = scanner.refresh()
    [entry] = changes.added
    for k in range(3):
        data = bytearray(path.read_bytes())
        value_at = image.entries["values"][0]
        struct.pack_into("=Q", data, value_at, 100 + k)  # a value written in place
        with open(path, "r+b") as f:
            f.write(data)
        os.utime(path, ns=(0, (k + 1) * 10**9))
        (tmp_path / f"churn{k}").write_bytes(b"")  # the directory changed: a listing
        changes = scanner.refresh()
        assert not changes.removed and not changes.added, changes
        assert scanner.catalogue.files["permanent"] is entry
        assert next(iter(entry.mf.values()))[2] == 100 + k
    new_generation(path, 0x9000)  # a new generation is still a reload
    os.utime(path, ns=(0, 10 * 10**9))
    scanner.mark_dirty("permanent")
    changes = scanner.refresh()
    assert [e.name for e in changes.removed] == [e.name for e in changes.added] == ["permanent"]


def test_served_files_stop_at_the_descriptor_bound_and_resume(tmp_path: Path) -> None:
    """Past the hard limit: served files and their writers' pidfds hold at most
    ``max_files`` descriptors (fdlimit.py); one more file is refused naming the limit,
    while the directory is still listed, and served once a served file leaves."""
    scanner = Scanner(str(tmp_path), Catalogue(), check_interval=0, budget=None)
    scanner.loader.resources.max_files = (
        6  # descriptors: a file loading counts two (its pidfd, if any)
    )
    for k in range(4):
        mmvbuild.single(10 + k, k).write(tmp_path / f"f{k}")
    scanner.refresh()
    assert sorted(scanner.catalogue.files) == ["f0", "f1", "f2"]
    assert scanner.states["f3"].state == "refused"
    assert "descriptor limit" in str(scanner.states["f3"].last_problem)
    (tmp_path / "f0").unlink()
    scanner.refresh()
    assert sorted(scanner.catalogue.files) == ["f1", "f2", "f3"]
    assert fdlimit.max_files(20_000) == 20_000 - fdlimit.RESERVE - 5_000


def test_memory_per_served_name_is_cut(tmp_path: Path) -> None:
    """The memory one served name costs the scanner, the catalogue and
    the serving model (python3-pcp's own tables aside), traced by tracemalloc: 1,957 bytes
    once (a closure, five cells, a tuple and a key list per name for its table builder),
    then 1,017 (a table builder, a name, a list of sources and a key per PMID, a node per
    leaf of the name tree), then 652 (the catalogue's record and key, the parsed entry
    with an array of one value offset and its own ints for its item and offsets), 523 now
    (the value offset of a singular metric an int, the ints that files repeat shared)."""
    hostile.prefixed_names(tmp_path, 20, 1000)
    scan = traced_scan(tmp_path, serve_metrics=True)
    per_name = scan.traced / len(scan.model.served_names)
    assert len(scan.model.served_names) == 20_000
    assert per_name < 560, per_name


def test_served_names_stop_at_max_names_and_resume(tmp_path: Path) -> None:
    """The names of all files together are bounded (1,000 files of 1,000
    metrics: 2.85 GB).  ``--max-names``: a file that would take the served files past it
    is refused naming the option, and served once a file leaves."""
    assert parse_args(["--max-names", "2500"]).max_names == 2500
    hostile.prefixed_names(tmp_path, 3, 1000)
    scanner = Scanner(
        str(tmp_path),
        Catalogue(),
        check_interval=0,
        budget=None,
        limits=Limits(max_names=2500),
    )
    scanner.refresh()
    assert sorted(scanner.catalogue.files) == ["f000", "f001"]
    assert "--max-names" in str(scanner.states["f002"].last_problem)
    (tmp_path / "f000").unlink()
    scanner.refresh()
    assert sorted(scanner.catalogue.files) == ["f001", "f002"]
