"""Watcher: watchdog events become queued marks, inotify or polling, across re-creation."""

from __future__ import annotations

import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from pmda_mmv.directory.filestate import ALL
from pmda_mmv.directory.watcher import Watcher


class Marks:
    def __init__(self) -> None:
        self.names: set[str] = set()
        self.event = threading.Condition()

    def __call__(self, name: str) -> None:
        with self.event:
            self.names.add(name)
            self.event.notify_all()

    def wait_for(self, name: str, timeout: float = 10) -> bool:
        with self.event:
            return self.event.wait_for(lambda: name in self.names, timeout)


@pytest.mark.parametrize("polling", [False, True], ids=["inotify", "polling"])
def test_file_events_are_marked_by_name(tmp_path: Path, polling: bool) -> None:
    marks = Marks()
    watcher = Watcher(str(tmp_path), marks, polling=polling)
    watcher.ensure()
    try:
        assert watcher.mode == ("polling" if polling else "inotify")
        assert ALL in marks.names  # arming queues a full look at the directory
        (tmp_path / "app").write_bytes(b"x")
        assert marks.wait_for("app")
    finally:
        watcher.stop()
    assert watcher.observer is None


def test_missing_directory_then_created_then_recreated(tmp_path: Path) -> None:
    mmv = tmp_path / "mmv"
    marks = Marks()
    watcher = Watcher(str(mmv), marks)
    watcher.ensure()
    assert watcher.observer is None  # nothing to watch yet, and no exception
    mmv.mkdir()
    watcher.ensure()
    try:
        assert watcher.inode is not None
        armed = watcher.observer
        shutil.rmtree(mmv)
        assert watcher.handler is not None
        deadline = time.monotonic() + 10
        while not watcher.handler.lost and time.monotonic() < deadline:
            time.sleep(0.05)
        mmv.mkdir()
        watcher.ensure()
        assert watcher.observer is not None and watcher.observer is not armed
        time.sleep(0.1)
        (mmv / "again").write_bytes(b"x")
        assert marks.wait_for("again")
    finally:
        watcher.stop()


SYSTEM_WATCHER = r"""
import os, sys, threading, time
sys.path.insert(0, sys.argv[1])
import watchdog.version
from pmda_mmv.directory.watcher import Watcher
directory = sys.argv[2]
names, seen = set(), {}
def mark(name):
    names.add(name)
    seen.setdefault(name, threading.Event()).set()
def wait(name):
    return seen.setdefault(name, threading.Event()).wait(10)
w = Watcher(directory, mark)
w.ensure()
print(watchdog.version.VERSION_STRING, w.mode)
path = os.path.join(directory, "app")
with open(path, "wb"):
    pass
assert wait("app"), names
time.sleep(0.5)
names.clear(); seen.clear()
os.chmod(path, 0o600)
assert wait("app"), "chmod not marked"
time.sleep(0.5)
names.clear()
with open(path, "rb"):
    pass
time.sleep(1)
w.stop()
print("ok", sorted(names))
"""


def test_the_watcher_works_with_the_systems_watchdog(tmp_path: Path) -> None:
    """The Debian package runs the agent with Debian's python3-watchdog (2.2.1 on Debian 12:
    no FileAttribEvent, no event_filter), not the venv's: a created and a chmodded file is
    marked, an open is not."""
    from tests.support.pmcd import CHECKOUT

    done = subprocess.run(
        ["/usr/bin/python3", "-P", "-c", SYSTEM_WATCHER, str(CHECKOUT), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    version, mode, ok, names = done.stdout.strip().split(maxsplit=3)
    assert mode == "inotify" and ok == "ok"
    assert names == "[]", (version, names)


def test_watcher_ignores_the_agents_own_opens(tmp_path: Path) -> None:
    """Opening and reading files (as the agent does at every retry) queues nothing; a write
    does."""
    names = [f"f{k}" for k in range(50)]
    for n in names:
        (tmp_path / n).write_bytes(b"x")
    marks: set[str] = set()
    cond = threading.Condition()

    def mark(name: str) -> None:
        with cond:
            marks.add(name)
            cond.notify_all()

    watcher = Watcher(str(tmp_path), mark)
    watcher.ensure()
    try:
        assert watcher.mode == "inotify"
        for _ in range(3):
            for n in names:
                (tmp_path / n).read_bytes()
        (tmp_path / "written").write_bytes(b"y")  # the last event: the others came before
        with cond:
            assert cond.wait_for(lambda: "written" in marks, 10)
        assert not marks & set(names), sorted(marks & set(names))[:5]
    finally:
        watcher.stop()


FLOOD = """
import os, sys, time
d, seconds = sys.argv[1], float(sys.argv[2])
end, n = time.monotonic() + seconds, 0
while time.monotonic() < end:
    for k in range(100):
        p = os.path.join(d, f".tmp{k}")
        os.close(os.open(p, os.O_CREAT | os.O_WRONLY, 0o644))
        os.unlink(p)
    n += 100
print(n)
"""


def test_the_watcher_drops_ignored_names_before_queueing_them(tmp_path: Path) -> None:
    """Another process creating and unlinking dot-files as fast as it can.
    Their events are dropped as they are read (filestate.ignore_reason, the scanner's
    rule), never marked, and nothing queues behind them: a real file written after the
    flood is marked within a second (watchdog's queues were still draining for tens of
    seconds after such a flood, its memory grown by hundreds of MB)."""
    marks: list[str] = []
    arrived: dict[str, float] = {}

    def mark(name: str) -> None:
        marks.append(name)
        arrived.setdefault(name, time.monotonic())

    watcher = Watcher(str(tmp_path), mark)
    watcher.ensure()
    try:
        flood = subprocess.run(
            [sys.executable, "-c", FLOOD, str(tmp_path), "4"],
            capture_output=True,
            text=True,
            check=True,
        )
        written = time.monotonic()
        (tmp_path / "after").write_bytes(b"x")
        deadline = written + 30
        while "after" not in arrived and time.monotonic() < deadline:
            time.sleep(0.01)
        assert "after" in arrived, len(marks)
        assert arrived["after"] - written < 1.0, (arrived["after"] - written, flood.stdout)
        assert not [m for m in marks if m.startswith(".")], len(marks)
    finally:
        watcher.stop()
