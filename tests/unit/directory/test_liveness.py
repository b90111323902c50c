"""pmda_mmv.directory.liveness and the /proc readings it decides by (directory.procfs),
directly (no pmcd): on a /proc tree of the test's own (NSpid, cgroups, mountinfo, maps),
and :class:`Writers` on real processes of this test: the writer that maps its PROCESS file
is found at once, a PID whose process started after the file is a reused PID, a negative
PID is no process ID, PID 0 and files without the flag have no writer, and a watched
writer's exit is reported at the next poll.  Under pmcd: tests/system/test_liveness.py and
test_containers.py."""

from __future__ import annotations

import mmap
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from pmda_mmv.directory import liveness, procfs
from pmda_mmv.directory.liveness import NoWriter, Writers
from pmda_mmv.mmvfile import layout
from pmda_mmv.mmvfile.reader import MmvFile
from tests.support import mmvbuild

DOCKER_ID = "0123456789abcdef" * 4


def fake_proc(tmp_path: Path, pid: int, **files: str | bytes) -> str:
    """A /proc tree with ``files`` (status, cgroup, mountinfo, maps) of process ``pid``."""
    top = tmp_path / "proc"
    (top / str(pid)).mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        data = text if isinstance(text, bytes) else text.encode()
        (top / str(pid) / name).write_bytes(data)
    return str(top)


# -- the /proc readings ----------------------------------------------------------------------


def test_innermost_is_the_last_nspid(tmp_path: Path) -> None:
    proc = fake_proc(tmp_path, 4711, status="Name:\tw\nUid:\t0\t0\t0\t0\nNSpid:\t4711\t12\t1\n")
    assert procfs.innermost(proc, 4711) == [4711, 12, 1]


def test_without_nspid_the_pid_is_its_own_innermost(tmp_path: Path) -> None:
    proc = fake_proc(tmp_path, 88, status="Name:\tw\nUid:\t0\t0\t0\t0\n")
    assert procfs.innermost(proc, 88) == [88]


def test_a_gone_or_garbled_process_has_no_innermost(tmp_path: Path) -> None:
    proc = fake_proc(tmp_path, 5, status="Name:\tw\nNSpid:\tfive\n")
    assert procfs.innermost(proc, 5) is None
    assert procfs.innermost(proc, 6) is None  # no such directory


@pytest.mark.parametrize(
    ("cgroup", "container"),
    [
        (f"/system.slice/docker-{DOCKER_ID}.scope", DOCKER_ID),
        (f"/docker/{DOCKER_ID}", DOCKER_ID),
        (f"/kubepods/besteffort/pod1/cri-containerd-{DOCKER_ID}.scope", DOCKER_ID),
        ("/user.slice/session-2.scope", "/user.slice/session-2.scope"),
        ("/machine/lxc-one", "/machine/lxc-one"),
    ],
)
def test_container_of_finds_the_id_else_keeps_the_path(cgroup: str, container: str) -> None:
    assert procfs.container_of(cgroup) == container


def test_cgroup_of_prefers_the_unified_hierarchy_then_systemd(tmp_path: Path) -> None:
    v1 = f"4:memory:/docker/{DOCKER_ID}\n1:name=systemd:/system.slice/x.service\n0::/\n"
    assert procfs.cgroup_of(fake_proc(tmp_path / "a", 1, cgroup=v1), 1) == (
        "/system.slice/x.service"
    )
    v2 = f"0::/system.slice/docker-{DOCKER_ID}.scope\n"
    assert procfs.cgroup_of(fake_proc(tmp_path / "b", 1, cgroup=v2), 1).endswith(".scope")
    assert procfs.cgroup_of(fake_proc(tmp_path / "c", 1, cgroup="0::/\n"), 1) == "/"
    assert procfs.cgroup_of(str(tmp_path / "none"), 1) == ""


MOUNTINFO = (
    "22 1 8:1 / / rw,relatime - ext4 /dev/sda1 rw\n"
    "30 22 8:1 /srv/shared\\040dir /run/mmv rw - ext4 /dev/sda1 rw\n"
    "31 22 0:5 / /dev rw - devtmpfs udev rw\n"
)


def test_mounts_decode_device_root_and_mount_point(tmp_path: Path) -> None:
    proc = fake_proc(tmp_path, 7, mountinfo=MOUNTINFO)
    sda1 = os.makedev(8, 1)
    assert procfs.mounts(proc, 7) == [
        (sda1, "/", "/"),
        (sda1, "/srv/shared dir", "/run/mmv"),
        (os.makedev(0, 5), "/", "/dev"),
    ]
    assert procfs.mounts(proc, 8) is None


def test_reaches_needs_a_mount_of_the_device_whose_root_holds_the_file(tmp_path: Path) -> None:
    """A container that bind-mounts only /srv/shared dir reaches files below it only."""
    only = "30 22 8:1 /srv/shared\\040dir /run/mmv rw - ext4 /dev/sda1 rw\n"
    proc = fake_proc(tmp_path, 7, mountinfo=only)
    sda1 = os.makedev(8, 1)
    assert procfs.reaches(proc, 7, sda1, "/srv/shared dir/app") is True
    assert procfs.reaches(proc, 7, sda1, "/srv/shared dirt/app") is False
    assert procfs.reaches(proc, 7, os.makedev(8, 2), "/srv/shared dir/app") is False
    assert procfs.reaches(proc, 8, sda1, "/srv/shared dir/app") is None


def test_holds_reads_the_maps_for_the_files_device_and_inode(tmp_path: Path) -> None:
    dev, ino = os.makedev(8, 1), 123456
    line = f"7f00-7f01 rw-s 00000000 08:01 {ino}                    /tmp/mmv/app\n"
    proc = fake_proc(tmp_path, 9, maps=line)
    (tmp_path / "proc" / "9" / "fd").mkdir()
    assert procfs.holds(proc, 9, dev, ino) is True
    assert procfs.maps_writable(proc, 9, dev, ino) is True
    assert procfs.holds(proc, 9, dev, ino + 1) is False
    read_only = fake_proc(tmp_path / "ro", 9, maps=line.replace("rw-s", "r--s"))
    assert procfs.maps_writable(read_only, 9, dev, ino) is False


# -- Writers, on real processes ----------------------------------------------------------------


def process_file(path: Path, pid: int, generation: int | None = None) -> MmvFile:
    b = mmvbuild.single(3, 1, flags=layout.FLAG_PROCESS, process=pid)
    if generation is not None:
        b.generation = generation
    b.write(path)
    return MmvFile.open(str(path))


@pytest.fixture
def writers() -> Writers:
    return Writers()


def test_the_process_that_maps_its_file_is_its_writer(tmp_path: Path, writers: Writers) -> None:
    mf = process_file(tmp_path / "mine", os.getpid())
    with open(tmp_path / "mine", "r+b") as f, mmap.mmap(f.fileno(), 0) as mapping:
        try:
            writer = writers.open(mf)
            assert writer is not None and writer.pid == os.getpid() and writer.confirmed
            assert writer.describe() == f"writer process {os.getpid()}"
            assert writer.labels() == {}  # the agent's own namespace: no container label
            assert writers.walks == 0  # found at once: no walk of /proc
            writer.close()
        finally:
            mf.close()
        assert mapping  # held until the writer was found


def test_no_flag_or_pid_zero_has_no_writer(tmp_path: Path, writers: Writers) -> None:
    mmvbuild.single(3).write(tmp_path / "plain")
    plain = MmvFile.open(str(tmp_path / "plain"))
    zero = process_file(tmp_path / "zero", 0)
    try:
        assert writers.open(plain) is None
        assert writers.open(zero) is None
    finally:
        plain.close()
        zero.close()


def test_a_negative_pid_is_no_process_id(tmp_path: Path, writers: Writers) -> None:
    mf = process_file(tmp_path / "neg", -5)
    try:
        with pytest.raises(NoWriter) as info:
            writers.open(mf)
        assert info.value.reason == "writer PID -5 is not a process ID"
        assert not info.value.exited
    finally:
        mf.close()


def test_a_process_started_after_the_file_is_a_reused_pid(tmp_path: Path, writers: Writers) -> None:
    """The file was created an hour before this (live) process started, which does not map
    it: its PID was reused."""
    hour_before = int(psutil.Process().create_time() - 3600) << 32
    mf = process_file(tmp_path / "old", os.getpid(), hour_before)
    try:
        with pytest.raises(NoWriter) as info:
            writers.open(mf)
        assert info.value.reason == (
            f"PID {os.getpid()} belongs to a process started after this file: PID reused"
        )
    finally:
        mf.close()


MAPPER = """
import mmap, sys
f = open(sys.argv[1], "r+b")
m = mmap.mmap(f.fileno(), 0)
print("mapped", flush=True)
sys.stdin.read()
"""


def test_a_watched_writers_exit_is_reported_at_the_next_poll(
    tmp_path: Path, writers: Writers
) -> None:
    """The child maps a file naming a PID that is not its own yet (its PID is known only
    once it runs), so the header is patched in place with it before the agent looks."""
    path = tmp_path / "child"
    mmvbuild.single(4, flags=layout.FLAG_PROCESS, process=1).write(path)
    child = subprocess.Popen(
        [sys.executable, "-c", MAPPER, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None and child.stdout.readline() == "mapped\n"
        mmvbuild.single(4, flags=layout.FLAG_PROCESS, process=child.pid).write(path)
        mf = MmvFile.open(str(path))
        writer = writers.open(mf)
        assert writer is not None and writer.pid == child.pid and writer.fd >= 0
        writers.watch("child", writer)
        assert writers.watched == 1
        assert writers.exited() == []
        child.communicate("", timeout=30)  # the child exits
        deadline = time.monotonic() + 10
        while writers.exited() != ["child"] and time.monotonic() < deadline:
            time.sleep(0.01)
        assert writers.exited() == ["child"]
        assert str(liveness.exit_problem("/d/child", mf, writer)).endswith(
            f"writer process {child.pid} has exited (MMV_FLAG_PROCESS), file not served"
        )
        writers.unwatch(writer)
        assert writers.watched == 0 and writer.fd == -1
        mf.close()
    finally:
        child.kill()
        child.wait()
