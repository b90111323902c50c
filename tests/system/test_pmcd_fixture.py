"""The private pmcd fixture (tests/support/pmcd.py) with each mmv agent: PCP's C pmdammv (the
reference), pmda-mmv run directly, and pmda-mmv through its launcher.  Values come from a
file written by python3-pcp's pcp.mmv (libpcp_mmv) into the private MMV directory."""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

from tests.support import mmvbuild
from tests.support.pmcd import AgentSpec, PmcdError, PrivatePmcd, c_agent, launcher_agent, our_agent

pytestmark = pytest.mark.pmcd

AGENTS: dict[str, Callable[[Path], AgentSpec]] = {
    "c": lambda mmv_dir: c_agent(mmv_dir.parent),
    "ours": our_agent,
    "launcher": launcher_agent,
}


def running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def shown(value: object) -> str:
    """How pminfo prints a value written to the file."""
    return f'"{value}"' if isinstance(value, str) else str(value)


@pytest.fixture(params=sorted(AGENTS))
def served(
    request: pytest.FixtureRequest,
    private_pmcd: Callable[..., PrivatePmcd],
    private_mmv_dir: Path,
) -> Iterator[tuple[PrivatePmcd, mmvbuild.Written]]:
    """(pmcd, what pcp.mmv wrote into private_mmv_dir/fixture) with one agent serving it."""
    written = mmvbuild.write_pcp_mmv(private_mmv_dir / "fixture")
    yield private_pmcd(AGENTS[request.param](private_mmv_dir)), written
    written.handle.stop()


def test_serves_the_written_values(served: tuple[PrivatePmcd, mmvbuild.Written]) -> None:
    pmcd, written = served
    for (name, inst), value in written.values.items():
        got = pmcd.fetch(f"mmv.fixture.{name}")
        assert inst in got, (name, got)
        if isinstance(value, float):
            assert float(got[inst]) == value
        else:
            assert got[inst] == shown(value)
    assert pmcd.fetch("mmv.control.files") == {None: "1"}
    probe = pmcd.run("pmprobe", "-v", "mmv.fixture.py.counter")
    assert probe.stdout.split() == ["mmv.fixture.py.counter", "1", shown(41)]


def test_agent_is_a_child_of_the_private_pmcd(
    served: tuple[PrivatePmcd, mmvbuild.Written],
) -> None:
    pmcd, _ = served
    assert pmcd.proc is not None
    agents = [psutil.Process(pid) for pid in pmcd.agent_processes()]
    assert len(agents) == 1, agents
    # PMCD_ROOT_AGENT=0: pmcd forked it, not the system pmdaroot; it dropped to user pcp
    assert agents[0].ppid() == pmcd.proc.pid
    assert agents[0].username() == "pcp"
    assert str(pmcd.workdir / "pmcd.conf") in psutil.Process(pmcd.proc.pid).cmdline()


def test_names_are_private(served: tuple[PrivatePmcd, mmvbuild.Written]) -> None:
    pmcd, _ = served
    assert pmcd.run("pminfo", "mmv.fixture.py.counter").returncode == 0
    # the same client without -h asks the system pmcd, which has no such file
    alone = subprocess.run(["pminfo", "mmv.fixture.py.counter"], capture_output=True, text=True)
    assert alone.returncode != 0, alone.stdout


def test_stop_ends_pmcd_and_its_agent(
    private_pmcd: Callable[..., PrivatePmcd], private_mmv_dir: Path
) -> None:
    pmcd = private_pmcd(our_agent(private_mmv_dir))
    pids = pmcd.agent_processes()
    assert pids
    pmcd.stop()
    assert not [p for p in pids if running(p)]
    with socket.socket() as s:
        assert s.connect_ex(("localhost", pmcd.port)) != 0


def test_store_reaches_the_agent(
    private_pmcd: Callable[..., PrivatePmcd], private_mmv_dir: Path
) -> None:
    pmcd = private_pmcd(our_agent(private_mmv_dir))
    assert pmcd.fetch("mmv.control.files") == {None: "0"}
    written = mmvbuild.write_pcp_mmv(private_mmv_dir / "late")
    try:
        store = pmcd.run("pmstore", "mmv.control.reload", "1")
        assert store.returncode == 0, store.stderr
        assert pmcd.fetch("mmv.late.py.counter") == {
            None: shown(written.values[("py.counter", None)])
        }
    finally:
        written.handle.stop()


def test_an_agent_that_cannot_start_is_reported(private_dir: Path, pcp_required: None) -> None:
    broken = AgentSpec("mmv", 70, ("/nonexistent/pmdammv", "-d", "70"))
    pmcd = PrivatePmcd(private_dir / "pmcd", [broken], timeout=5)
    with pytest.raises(PmcdError, match="does not serve mmv"):
        pmcd.start()
    assert pmcd.proc is None  # start() stopped the pmcd it had started
    assert os.path.exists(pmcd.log_dir / "pmcd.log")


@pytest.mark.parametrize(("agent", "name"), [("c", "pmdammv-reference"), ("launcher", "pmdammv")])
def test_process_names(
    private_pmcd: Callable[..., PrivatePmcd], private_mmv_dir: Path, agent: str, name: str
) -> None:
    """pmdaproc.sh stops processes named pmdammv: the launcher's agent must be one (Remove
    stops it), the private C reference must not (an Install elsewhere would stop it)."""
    pmcd = private_pmcd(AGENTS[agent](private_mmv_dir))
    assert [psutil.Process(pid).name() for pid in pmcd.agent_processes()] == [name]
