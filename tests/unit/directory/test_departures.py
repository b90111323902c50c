"""The departures thread (pmda_mmv/directory/departures.py) without pmcd: files of the
test-only byte builder in a directory watched as the agent watches it, a family served as
tests/support/family.py serves it."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

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
