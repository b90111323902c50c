"""Paths a local user controls, opened by the agent (root) under a private pmcd with its
default agent timeout (5 s): a container's /etc/pcp.conf and MMV directory, and a name in
the host's directory re-checked while it is not ready.  A FIFO, a device node or a symlink
planted at each must never be opened nor followed (pmda_mmv/mmvfile/opener.py): the agent
is never dropped, a good file's fetches all answer, each within a second, and no host file
is opened."""

from __future__ import annotations

import os
import shlex
import stat
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import mmvbuild
from tests.support.served import GOOD, QUICK, Client, Served, agent_pids, serve
from tests.support.untrusted import TMP, Container, Opens, held, swapper

pytestmark = [pytest.mark.pmcd, pytest.mark.host_pid_namespace, pytest.mark.serial]

HOST_ONLY = b"a host file no container may have read\n" * 2


@pytest.fixture(scope="module")
def served(request: pytest.FixtureRequest) -> Iterator[Served]:
    """pmda-mmv with ``--containers`` in a private pmcd (``-t`` 5 s), a sticky 1777
    directory and a live good file."""
    yield from serve(request, "--containers")


@pytest.fixture
def outside() -> Iterator[Path]:
    """A directory of the host outside the served one, that ``nobody`` can reach (a
    container's bind mount source)."""
    with tempfile.TemporaryDirectory(prefix="pmda-mmv-host-") as d:
        os.chmod(d, 0o755)
        yield Path(d)


def fetch_for(served: Served, seconds: float, *names: str) -> tuple[int, float]:
    """Fetches of the good file (and ``names``) for ``seconds``: how many, and the slowest;
    every one answers the good file."""
    client = Client(served.pmcd, GOOD, *names)
    fetches, slowest = 0, 0.0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        took, counts = client.fetch()
        assert counts[0] == 1, (fetches, counts, served.pmcd.pmcd_log()[-1500:])
        fetches, slowest = fetches + 1, max(slowest, took)
    return fetches, slowest


def served_in(served: Served, metric: str, seconds: float = 15) -> bool:
    """Whether ``metric`` is served within ``seconds`` (a walk of /proc every 5 s)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if served.pmcd.run("pmprobe", metric).stdout.split()[-1] == "1":
            return True
        time.sleep(0.2)
    return False


def with_plain(outside: Path) -> str:
    """The shell command that puts a good file, ``plain`` (its metric ``v`` is 5), into a
    container's MMV directory."""
    plain = outside / "plain"
    mmvbuild.single(cluster=7, value=5).write(plain)
    return f"cp {plain} {TMP}/mmv/"


def assert_served_quickly(served: Served, c: Container, seconds: float) -> None:
    """The container's ``plain`` served (its directory found by a walk of /proc), then
    fetched with the host's good file for ``seconds``, every request within QUICK."""
    metric = f"mmv.containers.{c.name}.plain.v"
    assert served_in(served, metric), served.pmcd.pmcd_log()[-1500:]
    _, slowest = fetch_for(served, seconds, metric)
    assert slowest < QUICK


@pytest.mark.parametrize("kind", ["fifo", "device", "symlink"])
def test_a_fifo_device_or_symlink_as_a_containers_pcp_conf(
    served: Served, outside: Path, kind: str
) -> None:
    """``nobody``'s container with a FIFO (no writer), a device or a symlink to a host
    file over its /etc/pcp.conf: the agent falls back to PCP's default PCP_TMP_DIR and
    serves the container's file there, never blocked in open(2) (it was, and pmcd dropped
    it), never opening the device nor the host file."""
    secret = outside / "pcp.conf"
    secret.write_bytes(b"PCP_TMP_DIR=/nonexistent\n")
    node = outside / "null"
    os.mknod(node, stat.S_IFCHR | 0o666, os.makedev(1, 3))  # /dev/null's, its own inode
    planted = {
        "fifo": f"mount --bind {outside}/fifo",
        "device": f"mount --bind {node}",
        "symlink": f"mount -t tmpfs tmpfs /etc && ln -s {secret} /etc/pcp.conf && true",
    }[kind]
    if kind == "fifo":
        os.mkfifo(outside / "fifo")
    opens = [Opens(node), Opens(secret)]
    planted = f"{planted} /etc/pcp.conf" if kind != "symlink" else planted
    c = Container(f"{with_plain(outside)} && {planted}")
    try:
        assert_served_quickly(served, c, 2.0)
        assert [o.count() for o in opens] == [0, 0]
        assert agent_pids(served.pmcd) == [served.pid]
    finally:
        c.stop()
        for o in opens:
            o.close()


def test_a_fifo_device_or_symlink_in_a_containers_directory(served: Served, outside: Path) -> None:
    """In ``nobody``'s container's MMV directory: a FIFO, a device (bind-mounted over a
    name) and a symlink to a host file, beside a good file: each refused as what it is,
    the device and the host file never opened, the good files served."""
    secret = outside / "secret"
    secret.write_bytes(HOST_ONLY)
    node = outside / "null"
    os.mknod(node, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    mmv = f"{TMP}/mmv"
    plant = f"mkfifo {mmv}/fifo && touch {mmv}/dev && mount --bind {node} {mmv}/dev"
    opens = [Opens(node), Opens(secret)]
    c = Container(f"{with_plain(outside)} && {plant} && ln -s {secret} {mmv}/link")
    try:
        assert_served_quickly(served, c, 1.0)
        state = served.pmcd.fetch("mmv.control.file.last_problem")
        problems = {k.rsplit("/", 1)[-1]: v for k, v in state.items() if k and c.name in k}
        assert "not a regular file (FIFO)" in problems["fifo"]
        assert "not a regular file (character device)" in problems["dev"]
        assert "symlink in a container's directory, not followed" in problems["link"]
        assert [o.count() for o in opens] == [0, 0]
    finally:
        c.stop()
        for o in opens:
            o.close()


@pytest.mark.parametrize("where", ["host", "container"])
def test_a_symlink_swapped_in_for_a_not_ready_file_never_opens_a_host_file(
    served: Served, outside: Path, where: str
) -> None:
    """An empty file (not ready: the agent re-checks its header through a descriptor it
    opens again) swapped for a symlink to a host-only file as soon as the agent opens it
    (inotify), for three seconds of fetches: the re-check opened the name again following
    the link, in the host's root, and read the host file; now it is never opened, every
    fetch quick."""
    secret = outside / "secret"
    secret.write_bytes(HOST_ONLY)
    opens = Opens(secret)
    if where == "container":
        swap = shlex.join(swapper(f"{TMP}/mmv/swapped", secret))
        c = Container(with_plain(outside), swap)
        swapping = c.proc
        assert served_in(served, f"mmv.containers.{c.name}.plain.v")  # its directory found
    else:
        cmd = swapper(str(served.dir / "swapped"), secret)
        swapping = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    try:
        fetches, slowest = fetch_for(served, 3.0)
        assert fetches > 100 and swapping.poll() is None, fetches
        assert slowest < QUICK
        assert not held(served.pid, secret)
        assert opens.count() == 0
        assert agent_pids(served.pmcd) == [served.pid]
    finally:
        swapping.kill()
        out, _ = swapping.communicate(timeout=30)
        opens.close()
        for name in ("swapped", ".e", ".l"):
            (served.dir / name).unlink(missing_ok=True)
    assert out.count("swapped\n") > 0  # the agent opened the empty file, the link raced it
