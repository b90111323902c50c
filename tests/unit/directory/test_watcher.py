"""Watcher: watchdog events become queued marks, inotify or polling, across re-creation."""

from __future__ import annotations

import shutil
import subprocess
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
