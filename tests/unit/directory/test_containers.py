"""``--containers`` without pmcd: paths resolved beneath a container's root, and the walk
of /proc bounded by the request budget (pmda_mmv/directory/containers.py)."""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import pytest

from pmda_mmv.agent.options import parse_args
from pmda_mmv.directory.containers import WALK_STEP, Containers, tmp_dir
from pmda_mmv.directory.scanner import Scanner
from pmda_mmv.mmvfile import layout
from pmda_mmv.mmvfile.reader import MmvFile
from pmda_mmv.namespace.catalogue import Catalogue
from tests.support import mmvbuild
from tests.support.family import World, file_changes, member
from tests.support.untrusted import Opens


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


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_a_fifo_or_device_as_the_containers_pcp_conf_is_not_opened(
    tmp_path: Path, kind: str
) -> None:
    """A FIFO (no writer) or a device at the container's /etc/pcp.conf: PCP's default at
    once, the agent never waits in open(2) for a writer nor opens the device."""
    (tmp_path / "etc").mkdir()
    conf = tmp_path / "etc" / "pcp.conf"
    if kind == "fifo":
        os.mkfifo(conf)
    else:
        os.mknod(conf, stat.S_IFCHR | 0o666, os.makedev(1, 3))  # /dev/null's
    opens = Opens(conf)
    fd = os.open(tmp_path, os.O_PATH | os.O_DIRECTORY)
    got: list[str] = []
    reader = threading.Thread(target=lambda: got.append(tmp_dir(fd)), daemon=True)
    reader.start()
    reader.join(2)
    blocked = reader.is_alive()
    if blocked:  # in open(2): released before the test fails
        os.close(os.open(conf, os.O_WRONLY | os.O_NONBLOCK))
        reader.join(2)
    os.close(fd)
    assert not blocked and got == ["/var/lib/pcp/tmp"]
    assert opens.count() == 0
    opens.close()


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
    processes = 5000
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


def test_container_names_never_collide_with_host_names(tmp_path: Path) -> None:
    """With --containers the subtree mmv.containers is the containers' alone: a host file
    named ``containers``, or a host NOPREFIX metric under it, is refused; a container's
    file (NOPREFIX too) is served under its own container's node; the registry keys a
    container's file by a name no host file can have."""
    cat = Catalogue(reserved=("control", "containers"))

    def load(name: str, metric: str = "v", flags: int = 0) -> MmvFile:
        path = tmp_path / name.replace("/", "_")
        mmvbuild.publish(path, mmvbuild.single(cluster=7, name=metric, flags=flags))
        return MmvFile.open(str(path), name=name)

    for host in (load("containers"), load("np", "containers.c1.app.v", layout.FLAG_NOPREFIX)):
        entry = cat.add(host)  # mmv.containers.v, mmv.containers.c1.app.v: none served
        assert entry is not None and not entry.metrics, host.name
        assert "is reserved for the agent" in str(entry.problems[0])
        cat.remove(host.name)  # the loader refuses a file with no metric served
    assert cat.add(load("app")) is not None  # the host's app, cluster 7
    own = cat.add(load("containers/c1/app"))
    bare = cat.add(load("containers/c1/bare", "w", layout.FLAG_NOPREFIX))
    assert own is not None and bare is not None
    assert [m.name for m in own.metrics] == ["mmv.containers.c1.app.v"]
    assert [m.name for m in bare.metrics] == ["mmv.containers.c1.w"]
    assert own.cluster != 7  # the host's "app" asked for 7 first and has it
    assert cat.registry.get(("containers/c1/app", os.getuid())) is not None
    assert cat.registry.get(("app", os.getuid())) is not None  # apart from the host's


def test_a_containers_file_never_joins_a_host_family(tmp_path: Path) -> None:
    """--family websrv='*' matches every file name, but a container's files
    (containers/<container>/<file>) are kept apart: only the host member is summed."""
    w = World(tmp_path, "websrv=*")
    w.add("w1", member(requests=(3, 4)))
    path = tmp_path / "c-w2"
    member(requests=(100, 200)).write(path)
    os.chown(path, 0, 0)
    entry = w.cat.add(MmvFile.open(str(path), name="containers/c1/w2"))
    assert entry is not None and entry.metrics  # served, under its own name
    w.apply(file_changes(added=[entry]))
    assert "containers/c1/w2" not in w.families.of_file
    assert w.fetch("requests") == {0: 3, 1: 4}


@pytest.mark.parametrize(
    "argv, why",
    [
        (["--containers", "-U", "pcp"], "no -U"),
        (["--containers", "--family", "containers=*"], "no family of that name"),
    ],
)
def test_containers_option_refuses_what_would_undo_it(
    argv: list[str], why: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """-U would drop the privilege --containers needs; a family named containers would take
    the containers' subtree."""
    assert parse_args(["--containers"]).containers
    with pytest.raises(SystemExit) as done:
        parse_args(argv)
    assert done.value.code == 2
    assert why in capsys.readouterr().err
