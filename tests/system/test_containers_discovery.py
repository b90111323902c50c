"""``--containers``: MMV directories inside containers' own filesystems, under a
private pmcd.

Each container is ``unshare --mount --pid --fork --mount-proc`` with a private tmpfs over
its ``/var/lib/pcp/tmp`` (the container's ``$PCP_TMP_DIR``, from the host's pcp.conf the
container shares), so its ``mmv`` directory exists in its mount namespace only; its writer
is python3-pcp's ``pcp.mmv`` (tests/support/writers/namespaced.py) at PID 1 there.  The agent must
find it, serve it as ``mmv.containers.<container>.<file>``, refuse anything that leads out
of the container's root, drop the container's files when it ends, and never move the host's
files' PMIDs.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from pmda_mmv.directory.procfs import cgroup_of, container_of
from tests.support import mmvbuild
from tests.support.containers import CONTAINER_ID, NAMESPACED, PYTHON
from tests.support.pmcd import kept_dir
from tests.support.served import Agent, start_agent

pytestmark = [pytest.mark.pmcd, pytest.mark.host_pid_namespace]

TMP = "/var/lib/pcp/tmp"  # the container's PCP_TMP_DIR (the host's /etc/pcp.conf)
HOST = ["mmv.good.py.counter", "mmv.good.py.gauge", "mmv.good.py.name"]


@dataclass
class Container:
    """``unshare`` (its process), the writer (PID 1 inside) and the agent's name for it."""

    unshare: subprocess.Popen[str]
    pid: int
    name: str

    @property
    def mmv(self) -> Path:
        """The container's mmv directory, as the host sees it (root only)."""
        return Path(f"/proc/{self.pid}/root{TMP}/mmv")

    def stop(self) -> None:
        """The container ends: every process of it killed and reaped."""
        procs = [psutil.Process(self.unshare.pid)]
        procs += procs[0].children(recursive=True)
        if self.unshare.stdin is not None:
            self.unshare.stdin.close()
        self.unshare.kill()  # --kill-child: its namespace's init goes, and all in it
        self.unshare.wait(30)
        psutil.wait_procs(procs, timeout=10)


def container(
    setup: str, command: str, cgroup_dir: Path | None, tmp: str = TMP, prepare: str = ""
) -> Container:
    """Start a container (in ``cgroup_dir`` when given) that runs ``prepare`` (sh), mounts
    a private tmpfs on ``tmp``, runs ``setup`` there, then the writer, given ``command``;
    returns once it is written."""
    mounts = f"{prepare} mount -t tmpfs tmpfs {tmp} && mkdir {tmp}/mmv &&"
    script = f"{mounts} {setup} exec {PYTHON} {NAMESPACED}"
    join = f"echo $$ > {cgroup_dir}/cgroup.procs && " if cgroup_dir is not None else ""
    unshare = "unshare --mount --pid --fork --mount-proc --kill-child"
    cmd = ["sh", "-c", f"{join}exec {unshare} sh -c '{script}'"]
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(command + "\n")
    proc.stdin.flush()
    line = proc.stdout.readline()
    kids = psutil.Process(proc.pid).children(recursive=True)
    c = Container(proc, kids[-1].pid if kids else 0, "")
    if not line.startswith("ready"):
        c.stop()
        raise AssertionError(f"container writer: {line!r}")
    ident = container_of(cgroup_of("/proc", proc.pid))
    ns = os.stat(f"/proc/{proc.pid}/ns/mnt").st_ino
    c.name = f"c{ident[:12]}" if len(ident) == 64 else f"mnt{ns}"
    return c


@pytest.fixture(scope="module")
def agent(request: pytest.FixtureRequest) -> Iterator[Agent]:
    for base in kept_dir(request, "pmda-mmv-containers2-", "containers work directory"):
        a = start_agent(base / "main", "--containers")
        a.good = mmvbuild.write_pcp_mmv(a.dir / "good", cluster=42)
        try:
            yield a
        finally:
            a.pmcd.stop()
            a.good.handle.stop()


def pmids(agent: Agent, *names: str) -> dict[str, str]:
    """``pminfo -m``: {name: PMID}."""
    out = agent.pmcd.run("pminfo", "-m", *names).stdout
    return {ln.split()[0]: ln.split("PMID: ")[1] for ln in out.splitlines() if "PMID: " in ln}


def wait_for(agent: Agent, metric: str, want: str, seconds: float = 20) -> str:
    """The metric's pmprobe answer once it is ``want`` (a walk of /proc every 5 s)."""
    got = ""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        got = agent.probe(metric)[metric]
        if got == want:
            break
        time.sleep(0.1)
    return got


def test_a_writer_in_its_own_mount_namespace_is_served_then_gone_with_it(
    agent: Agent,
    cgroup: tuple[Path | None, str],
) -> None:
    """Discovered, served under mmv.containers.<container>, labelled with the container,
    in a cluster of its own though it asks for the host file's; the container's exit
    removes it at the next request; the host file's PMIDs never move."""
    before = pmids(agent, *HOST)
    assert len(before) == 3
    c = container("", f"write {TMP}/mmv/good 1 42", cgroup[0])
    try:
        metric = f"mmv.containers.{c.name}.good.alive"
        if cgroup[0] is not None:
            assert c.name == f"c{CONTAINER_ID[:12]}"
        assert wait_for(agent, metric, "1 17") == "1 17"
        labels = agent.pmcd.run("pminfo", "-l", metric).stdout
        assert f'"container":"{cgroup[1]}"' in labels
        ours = pmids(agent, metric)[metric]
        assert ours.split(".")[1] != "42", ours  # the host file has cluster 42
        assert pmids(agent, *HOST) == before
        state = agent.pmcd.fetch("mmv.control.file.state")
        assert state[f"containers/{c.name}/good"] == '"ok"'
    finally:
        c.stop()
    assert agent.probe(metric)[metric].startswith("-")  # the next request: gone
    assert c.name not in agent.pmcd.run("pminfo", "mmv.containers").stdout
    assert pmids(agent, *HOST) == before


def test_a_file_that_is_not_a_process_file_goes_with_its_container(agent: Agent) -> None:
    """No writer to follow: the container's end (its last process) removes it."""
    c = container("", f"write {TMP}/mmv/idle 1 0", None)
    try:
        mmvbuild.publish(c.mmv / "plain", mmvbuild.single(cluster=7, value=5))
        metric = f"mmv.containers.{c.name}.plain.v"
        assert wait_for(agent, metric, "1 5") == "1 5"
    finally:
        c.stop()
    assert agent.probe(metric)[metric].startswith("-")


def test_a_symlink_in_a_container_to_a_host_file_is_refused(agent: Agent, tmp_path: Path) -> None:
    """A symlink planted in the container's directory naming the host's served file, where
    the container's PCP_TMP_DIR (its own pcp.conf, bind-mounted over /etc/pcp.conf) is the
    host's path: the agent's namespace resolves the link to the host file, in a directory
    of the same name, yet it is refused; a container whose mmv directory is itself a
    symlink to the host's has nothing served."""
    host = agent.dir / "good"
    conf = tmp_path / "pcp.conf"
    conf.write_text(f"PCP_VAR_DIR=/var/lib/pcp\nPCP_TMP_DIR={agent.dir.parent}\n")
    prepare = f"mount --bind {conf} /etc/pcp.conf &&"
    own = f"write {agent.dir}/own 1 0"
    c = container(f"ln -s {host} {agent.dir}/good &&", own, None, str(agent.dir.parent), prepare)
    setup = f"rmdir {TMP}/mmv && ln -s {agent.dir} {TMP}/mmv &&"
    link = container(setup, f"write {TMP}/idle 1 0", None)
    try:
        assert wait_for(agent, f"mmv.containers.{c.name}.own.alive", "1 17") == "1 17"
        names = agent.pmcd.run("pminfo", "mmv.containers").stdout.split()
        assert f"mmv.containers.{c.name}.own.alive" in names
        assert not [n for n in names if ".good." in n or f".{link.name}." in n], names
        state = agent.pmcd.fetch("mmv.control.file.state")
        assert state[f"containers/{c.name}/good"] == '"refused"'
        problem = agent.pmcd.fetch("mmv.control.file.last_problem")[f"containers/{c.name}/good"]
        assert "symlink in a container's directory, not followed" in problem
    finally:
        c.stop()
        link.stop()


def test_the_host_files_are_not_served_again_as_a_containers(agent: Agent) -> None:
    """A mount namespace that shares the host's directory (a bind mount, a service's
    private /tmp) is no container's: its files are the host's, served once."""
    proc = subprocess.Popen(["unshare", "--mount", "sleep", "60"])
    try:
        ns = os.stat(f"/proc/{proc.pid}/ns/mnt").st_ino
        time.sleep(6)  # one walk of /proc at least
        agent.probe("mmv.good.py.counter")
        names = agent.pmcd.run("pminfo", "mmv.containers").stdout
        assert f"mnt{ns}" not in names
    finally:
        proc.kill()
        proc.wait()
