"""A file's life under pmcd (the directory layer: file state, not-ready grace, reloads):
files rewritten, truncated, grown, renamed over and recreated under a fetch loop, the
directory removed and recreated, writers that never complete a header or start while the
agent does.  The agent stays the same process and the good file (tests/support/served.py)
answers throughout; a file that stays not ready is explained once."""

from __future__ import annotations

import mmap
import os
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from pmda_mmv.directory.filestate import NOT_READY_GRACE
from tests.support import mmvbuild
from tests.support.mmvbuild import single as one
from tests.support.pmcd import PrivatePmcd, make_dir, our_agent
from tests.support.served import (
    EMPTY,
    GOOD,
    UNKNOWN_NAME,
    Agent,
    Scratch,
    agent_pids,
)

pytestmark = pytest.mark.pmcd


class Fetcher(threading.Thread):
    """Runs ``pmprobe -v GOOD metrics...`` back to back until stopped."""

    def __init__(self, agent: Agent, *metrics: str) -> None:
        super().__init__(daemon=True)
        self.agent = agent
        self.metrics = metrics
        self.results: list[dict[str, str]] = []
        self.done = threading.Event()
        self.progress = threading.Semaphore(0)

    def run(self) -> None:
        while not self.done.is_set():
            self.results.append(self.agent.probe(GOOD, *self.metrics))
            self.progress.release()

    def wait_fetches(self, n: int) -> None:
        for _ in range(n):
            assert self.progress.acquire(timeout=30), "the client made no progress"

    def stop(self) -> list[dict[str, str]]:
        self.done.set()
        self.join(30)
        return self.results


def assert_good_throughout(agent: Agent, results: list[dict[str, str]]) -> None:
    """Every fetch of the loop got the good counter (its value is written only by the test,
    between loops, so any single value is right)."""
    assert results
    for got in results:
        count, _, value = got.get(GOOD, "").partition(" ")
        assert count == "1" and value.isdigit(), got


def rewrite_in_place(path: Path, data: bytes) -> None:
    """Overwrite ``path`` in place (same inode), shrinking or growing it to ``data``."""
    with open(path, "r+b") as f:
        f.write(data)
        f.truncate(len(data))


def recreate(path: Path, data: bytes) -> None:
    path.unlink()
    path.write_bytes(data)


def truncate_then_restore(path: Path, data: bytes) -> None:
    os.truncate(path, 0)
    os.truncate(path, len(data) // 2)
    rewrite_in_place(path, data)


def grow_then_shrink(path: Path, data: bytes) -> None:
    with open(path, "ab") as f:
        f.write(bytes(1 << 16))
    rewrite_in_place(path, data)


RACES: dict[str, Callable[[Path, bytes], None]] = {
    "truncated": truncate_then_restore,
    "grown": grow_then_shrink,
    "rewritten_in_place": rewrite_in_place,
    "renamed_over": mmvbuild.publish,
    "unlinked_recreated": recreate,
}


@pytest.mark.parametrize("race", sorted(RACES))
def test_lifecycle_race_under_a_fetch_loop(agent: Agent, scratch: Scratch, race: str) -> None:
    path = scratch.path(race)
    one(cluster=20, value=0, generation=1 << 40).write(path)
    metric = f"mmv.{race}.v"
    assert agent.probe(metric)[metric] == "1 0"
    fetcher = Fetcher(agent, metric)
    fetcher.start()
    try:
        for i in range(1, 41):
            RACES[race](
                path, bytes(one(cluster=20, value=i, generation=(1 << 40) + i).build().data)
            )
            if i % 8 == 0:
                fetcher.wait_fetches(2)
    finally:
        results = fetcher.stop()
    assert_good_throughout(agent, results)
    for got in results:  # the victim: its value, an error, or momentarily no such name
        assert got.get(metric), got
    agent.assert_alive()
    assert agent.probe(metric)[metric] == "1 40"
    assert agent.status(race)[0] == "ok"


def test_directory_removed_and_recreated(agent: Agent) -> None:
    assert agent.good is not None
    agent.good.handle.stop()
    shutil.rmtree(agent.dir)
    assert agent.probe(GOOD)[GOOD].startswith(UNKNOWN_NAME)
    assert agent.pmcd.fetch("mmv.control.files") == {None: "0"}
    make_dir(agent.dir)
    agent.good = mmvbuild.write_pcp_mmv(agent.dir / "good")
    agent.counter = 41
    agent.assert_alive()
    assert agent.pmcd.fetch("mmv.control.files") == {None: "1"}


@pytest.mark.parametrize("g1,g2", [(0, 0), (5, 6)], ids=["generation0", "g1_ne_g2"])
def test_writer_that_never_completes(agent: Agent, scratch: Scratch, g1: int, g2: int) -> None:
    b = one(cluster=21, value=3)
    b.header.update(g1=g1, g2=g2)
    name = f"unfinished{g1}"
    metric = f"mmv.{name}.v"
    path = scratch.put(name, b)
    for _ in range(10):  # every request retries the file; the good values keep moving
        value = agent.bump()
        got = agent.probe(GOOD, metric)
        assert got[GOOD] == f"1 {value}"
        assert got[metric].startswith(UNKNOWN_NAME)
    where = "header.g1 at offset 8" if g1 == 0 else "header.g2 at offset 16"
    explained_after_grace(agent, path, where)
    img = b.build()
    img.patch("header", 0, "g1", 7).patch("header", 0, "g2", 7)
    rewrite_in_place(path, bytes(img.data))  # the writer finishes: served at the next request
    assert agent.probe(metric)[metric] == "1 3"


def zero_bytes(path: Path) -> object:
    path.write_bytes(b"")
    return None


def explained_after_grace(agent: Agent, path: Path, where: str) -> None:
    """A file that stays not ready is logged once, at the first request after
    NOT_READY_GRACE (writers pass through the state, so it is not logged at once)."""
    time.sleep(NOT_READY_GRACE)
    agent.probe(f"mmv.{path.name}")
    agent.assert_explained(path, "not-ready", where)


def test_empty_file_is_not_ready_and_explained_when_it_stays_so(
    agent: Agent, scratch: Scratch
) -> None:
    path = scratch.path("zero_bytes")
    zero_bytes(path)
    agent.assert_alive()
    assert agent.status("zero_bytes") == ("not-ready", f"{path}: {EMPTY}")
    assert agent.log_lines(path) == []  # not yet: libpcp_mmv creates, then sizes its files
    explained_after_grace(agent, path, EMPTY)
    one(cluster=23, value=4).write(path)  # the writer sizes and fills it
    assert agent.probe("mmv.zero_bytes.v")["mmv.zero_bytes.v"] == "1 4"


def test_file_seen_before_its_header_is_served_once_written(agent: Agent, scratch: Scratch) -> None:
    data = bytes(one(cluster=29, value=8).build().data)
    path = scratch.path("late")
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)  # as mmv_mapping_init
    os.ftruncate(fd, len(data))
    mapping = mmap.mmap(fd, len(data))
    os.close(fd)
    with mapping:
        for _ in range(3):  # until every event (the agent's own open included) is consumed
            time.sleep(1)
            assert agent.probe("mmv.late.v")["mmv.late.v"].startswith(UNKNOWN_NAME)
        mapping[:] = data  # mmv_init fills the file through the mapping
        time.sleep(1)  # (the writer keeps its mapping: unmapping would signal IN_CLOSE_WRITE)
        assert agent.probe("mmv.late.v")["mmv.late.v"] == "1 8"


class Rewriter(threading.Thread):
    """Rewrites a file in place with a new generation and value, back to back."""

    def __init__(self, path: Path) -> None:
        super().__init__(daemon=True)
        self.path = path
        self.done = threading.Event()
        self.last = 0

    def run(self) -> None:
        while not self.done.is_set():
            self.last += 1
            data = bytes(
                one(cluster=34, value=self.last, generation=(1 << 40) + self.last).build().data
            )
            rewrite_in_place(self.path, data)

    def stop(self) -> int:
        self.done.set()
        self.join(30)
        return self.last


def test_busy_writer_while_the_agent_starts(base: Path) -> None:
    mmv_dir = make_dir(base / "busy" / "tmp" / "mmv")
    path = mmv_dir / "busy"
    one(cluster=34, value=0).write(path)
    for n in range(40):  # a scan long enough for the busy file to move on before its check
        one(cluster=40 + n, value=n).write(mmv_dir / f"quiet{n:02d}")
    rewriter = Rewriter(path)
    rewriter.start()
    pmcd = PrivatePmcd(base / "busy" / "pmcd", [our_agent(mmv_dir, "--status-metrics")])
    try:
        pmcd.start()
        pid = agent_pids(pmcd)
        for _ in range(30):  # each request 0.1 s apart also checks every served file
            pmcd.run("pmprobe", "-v", "mmv.busy.v")
            time.sleep(0.1)
        last = rewriter.stop()
        assert "Traceback" not in pmcd.agent_log() and "KeyError" not in pmcd.agent_log()
        assert pmcd.run("pmprobe", "-v", "mmv.busy.v").stdout.split()[1:] == ["1", str(last)]
        assert agent_pids(pmcd) == pid
    finally:
        rewriter.stop()
        pmcd.stop()
