"""``--containers`` without pmcd: paths resolved beneath a container's root, and the walk
of /proc bounded by the request budget (pmda_mmv/directory/containers.py)."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from pmda_mmv.directory.containers import WALK_STEP, Containers, open_beneath, tmp_dir
from pmda_mmv.directory.scanner import Scanner
from pmda_mmv.namespace.catalogue import Catalogue


def test_open_beneath_never_follows_a_symlink_nor_dotdot(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "var" / "lib").mkdir(parents=True)
    (tmp_path / "host").mkdir()
    (root / "var" / "out").symlink_to(tmp_path / "host")
    (root / "var" / "in").symlink_to("lib")  # even one that stays inside
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        got = open_beneath(fd, "/var/lib")
        assert os.fstat(got).st_ino == (root / "var" / "lib").stat().st_ino
        os.close(got)
        for path in ("/var/out", "/var/in", "/var/out/x"):
            with pytest.raises(OSError) as e:
                open_beneath(fd, path)
            assert e.value.errno in (errno.ELOOP, errno.ENOTDIR), path  # O_NOFOLLOW
        with pytest.raises(OSError) as e:
            open_beneath(fd, "/var/../../host")
        assert e.value.errno == errno.EPERM
    finally:
        os.close(fd)


def test_the_containers_pcp_conf_says_where_its_tmp_dir_is(tmp_path: Path) -> None:
    (tmp_path / "etc").mkdir()
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert tmp_dir(fd) == "/var/lib/pcp/tmp"  # no pcp.conf: PCP's default
        conf = tmp_path / "etc" / "pcp.conf"
        conf.write_text("# PCP\nPCP_TMP_DIR=/srv/pcp/tmp\n")
        assert tmp_dir(fd) == "/srv/pcp/tmp"
        conf.write_text("PCP_TMP_DIR=$PCP_VAR_DIR/tmp\n")  # no variables: the default
        assert tmp_dir(fd) == "/var/lib/pcp/tmp"
        conf.unlink()
        (tmp_path / "elsewhere.conf").write_text("PCP_TMP_DIR=/host\n")
        conf.symlink_to(tmp_path / "elsewhere.conf")  # a symlink: not read
        assert tmp_dir(fd) == "/var/lib/pcp/tmp"
    finally:
        os.close(fd)


def fake_proc(base: Path, processes: int) -> Path:
    """A /proc of ``processes`` processes, all in the agent's mount namespace."""
    proc = base / "proc"
    (proc / "self" / "ns").mkdir(parents=True)
    (proc / "self" / "ns" / "mnt").write_text("")
    for pid in range(1, processes + 1):
        (proc / str(pid) / "ns").mkdir(parents=True)
        os.link(proc / "self" / "ns" / "mnt", proc / str(pid) / "ns" / "mnt")
    return proc


def test_the_walk_of_proc_is_cut_by_the_budget_and_resumes(tmp_path: Path) -> None:
    """Past the deadline a request reads WALK_STEP processes and the walk resumes at the
    next; one walk, then none until the interval has passed."""
    processes = 1000
    proc = fake_proc(tmp_path, processes)
    (tmp_path / "mmv").mkdir()
    scanner = Scanner(str(tmp_path / "mmv"), Catalogue())
    c = Containers(str(tmp_path / "mmv"), proc=str(proc), interval=5.0)
    requests = 0
    while c.walks == 0:
        requests += 1
        c.refresh(scanner, 0.0, deadline=0.0, clock=lambda: 1.0)  # always past it
        assert requests <= processes
    assert requests == -(-processes // WALK_STEP)
    for now in (1.0, 4.9):
        c.refresh(scanner, now, deadline=None, clock=lambda: 0.0)
    assert c.walks == 1 and c._walking is None  # not before the interval
    c.refresh(scanner, 5.0, deadline=None, clock=lambda: 0.0)
    assert c.walks == 2
    c.close()
