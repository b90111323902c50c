"""The departures thread (pmda_mmv/directory/departures.py) without pmcd: files of the
test-only byte builder in a directory watched as the agent watches it, a family served as
tests/support/family.py serves it."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from pmda_mmv.directory import departures as departures_module
from pmda_mmv.directory.departures import Departures
from pmda_mmv.directory.watcher import Watcher
from pmda_mmv.mmvfile import layout
from pmda_mmv.namespace.registry import Registry
from tests.support.family import World, member


def gone_pid() -> int:
    """The PID of a process that has exited."""
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def family_world(tmp_path: Path) -> tuple[Path, str, World]:
    """A directory ``mmv`` with one live member of family websrv, the registry's path
    (saved) and the family served from it."""
    mmv = tmp_path / "mmv"
    mmv.mkdir()
    path = str(tmp_path / "identity.json")
    w = World(mmv, "websrv=websrv_*", Registry(path))
    w.add("websrv_live", member((1, 1)))
    assert w.registry.save()
    return mmv, path, w


def test_a_file_left_by_a_writer_that_is_gone_is_credited_once_at_start(tmp_path: Path) -> None:
    """A worker killed while the agent was down left its file: the agent's start credits
    its counts once; a second restart does not credit them again."""
    mmv, path, w = family_world(tmp_path)
    dead = member((30, 60), generation=0x5F5E1000000002)
    dead.flags, dead.process = layout.FLAG_PROCESS, gone_pid()
    dead.write(mmv / "websrv_dead")
    for _ in range(2):  # the agent started, then started again
        registry = Registry(path)
        registry.load()
        w = World(mmv, "websrv=websrv_*", registry)
        Departures(str(mmv), w.families, registry, w.log.append).start()
        assert w.families.families[0].totals.get("requests") == {0: 30, 1: 60}


def test_a_held_member_unlinked_between_requests_is_credited_and_saved_at_once(
    tmp_path: Path,
) -> None:
    """A member whose file is created and unlinked with no request meanwhile: the
    departures thread holds it from its creation and credits its last values, saved."""
    mmv, path, w = family_world(tmp_path)
    departures = Departures(str(mmv), w.families, w.registry, w.log.append)
    watcher = Watcher(str(mmv), departures.notice)
    watcher.ensure()
    departures.start()
    try:
        quick = mmv / "websrv_quick"
        member((7, 9), generation=0x5F5E1000000005).write(quick)
        deadline = time.monotonic() + 5
        while "websrv_quick" not in departures.held:
            assert time.monotonic() < deadline, w.log
            time.sleep(0.01)
        os.unlink(quick)
        while departures.credits < 1:
            assert time.monotonic() < deadline, w.log
            time.sleep(0.01)
        again = Registry(path)  # on disk: an agent killed now loses nothing
        again.load()
        record = again.get(w.families.families[0].key)
        assert record is not None and record.totals["requests"] == {0: 7, 1: 9}
        assert record.credited == [("websrv_quick", 0x5F5E1000000005, 0x5F5E1000000005)]
    finally:
        watcher.stop()


def test_a_strangers_matching_file_is_not_held(tmp_path: Path) -> None:
    """A file of another owner matching the family's pattern takes no descriptor of the
    departures thread, and its departure credits nothing."""
    mmv, _, w = family_world(tmp_path)
    assert w.families.families[0].owner == os.getuid()
    stranger = mmv / "websrv_stranger"
    member((5, 5), generation=0x5F5E1000000007).write(stranger)
    os.chown(stranger, os.getuid() + 4242, os.getgid() + 4242)
    departures = Departures(str(mmv), w.families, w.registry, w.log.append)
    departures.start()
    assert "websrv_stranger" not in departures.held and "websrv_live" in departures.held
    os.unlink(stranger)
    departures._look("websrv_stranger")
    departures._settle(None)
    assert departures.credits == 0 and not w.families.families[0].totals


def test_matching_files_held_are_bounded_with_one_log_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past MAX_HELD matching files, a new one is not held (one log line, not one a file);
    once one is released, the next is held again."""
    monkeypatch.setattr(departures_module, "MAX_HELD", 3)
    mmv, _, w = family_world(tmp_path)
    for k in range(6):
        member((k, k), generation=0x5F5E1000000100 + k).write(mmv / f"websrv_{k}")
    departures = Departures(str(mmv), w.families, w.registry, w.log.append)
    departures.start()
    assert len(departures.held) == 3
    lines = [line for line in w.log if "matching files held" in line]
    assert len(lines) == 1 and "are not held" in lines[0], w.log
    gone = sorted(departures.held)[0]
    os.unlink(mmv / gone)
    departures._look(gone)
    departures._settle(None)
    assert gone not in departures.held and departures.credits == 1
    departures._look("websrv_5")
    assert "websrv_5" in departures.held and len(departures.held) == 3
