"""docs/multiprocess.md's pre-fork example (examples/prefork_server.py, python3-pcp pcp.mmv
run by /usr/bin/python3) served by pmda-mmv under a private pmcd: every command the doc
shows is run here as shown (plus ``-h`` for the private pmcd) and must appear in the doc
verbatim."""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.pmcd import CHECKOUT, PrivatePmcd, our_agent

pytestmark = pytest.mark.pmcd

DOC = (CHECKOUT / "docs" / "multiprocess.md").read_text()
README = (CHECKOUT / "README.md").read_text()
SYSTEM_PYTHON = "/usr/bin/python3"
# pmrep's interpreter is found through PATH (pmpython): python3-pcp lives in /usr/bin/python3
ENV = dict(os.environ, PATH="/usr/bin:/bin:" + os.environ.get("PATH", ""))
ROW = re.compile(r"^\s*(N/A|-?\d+(?:\.\d+)?)\s*$")  # pmrep's rows of one value

PMINFO = "pminfo -f mmv.websrv.requests"
PMREP = "pmrep -t 1 -s 4 -e 'websrv.total=sum(mmv.websrv.requests)' websrv.total"
PMLOGGER = "pmlogger -c websrv.config -t 1sec -T 8sec websrv-archive"
PMREP_ARCHIVE = (
    "pmrep -a websrv-archive -S +1sec -e 'websrv.total=sum(mmv.websrv.requests)' websrv.total"
)
CONFIG = "log mandatory on every 1 sec {\n    mmv.websrv\n}\n"
PRUNE = "pmda-mmv prune"


def shown(command: str) -> list[str]:
    """``command`` as the doc shows it (it must), split as a shell would."""
    assert command in DOC, f"docs/multiprocess.md does not show: {command}"
    if command.startswith("pmrep"):
        assert command in README, f"README does not show: {command}"
    return shlex.split(command)


def run(pmcd: PrivatePmcd, command: str, cwd: Path | None = None) -> str:
    """Run a shown PCP client against the private pmcd; its output."""
    argv = shown(command)
    if "-a" not in argv:
        argv[1:1] = ["-h", pmcd.host]
    env = dict(ENV, PCP_TMP_DIR=str(pmcd.tmp_dir))  # pmlogger's own control files
    out = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=cwd, env=env)
    assert out.returncode == 0, f"{command}: {out.stdout}{out.stderr}"
    return out.stdout


def in_range(rate: str) -> bool:
    """A rate of the server's 3 workers at --rate 50 (about 150/s; loaded machines less)."""
    return rate != "N/A" and 30 <= float(rate) <= 300


def rates(output: str) -> list[str]:
    """pmrep's rows of one value (the first is N/A: a rate needs two samples)."""
    return [m.group(1) for line in output.splitlines() if (m := ROW.match(line))]


def start_server(mmv_dir: Path, *extra: str) -> subprocess.Popen[bytes]:
    argv = [SYSTEM_PYTHON, str(CHECKOUT / "examples" / "prefork_server.py")]
    server = subprocess.Popen(
        [*argv, "--tmp-dir", str(mmv_dir.parent), "--workers", "3", *extra],
        start_new_session=True,  # its own process group: the test can kill it all
    )
    deadline = time.monotonic() + 30
    while len(list(mmv_dir.iterdir())) < 3:
        assert server.poll() is None, "prefork_server.py exited"
        assert time.monotonic() < deadline, "the workers' files did not appear"
        time.sleep(0.1)
    return server


@pytest.fixture
def servers() -> Iterator[Callable[..., subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []

    def start(mmv_dir: Path, *extra: str) -> subprocess.Popen[bytes]:
        server = start_server(mmv_dir, *extra)
        started.append(server)
        return server

    yield start
    for server in started:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(30)


@pytest.mark.host_pid_namespace  # it prunes
def test_prefork_server_totals_as_the_doc_shows(
    private_pmcd: Callable[..., PrivatePmcd],
    private_mmv_dir: Path,
    private_dir: Path,
    servers: Callable[..., subprocess.Popen[bytes]],
) -> None:
    server = servers(private_mmv_dir, "--rate", "50")
    assert sorted(p.name for p in private_mmv_dir.iterdir()) == [f"websrv_w{n}" for n in range(3)]
    pmcd = private_pmcd(our_agent(private_mmv_dir))

    values = run(pmcd, PMINFO)
    assert re.findall(r'inst \[(\d) or "(w\d)"\] value \d+', values) == [
        ("0", "w0"),
        ("1", "w1"),
        ("2", "w2"),
    ]

    out = run(pmcd, PMREP)  # requests/s of the server: 3 workers at 50/s each
    live = rates(out)
    assert len(live) == 4 and live[0] == "N/A", out
    assert all(in_range(r) for r in live[1:]), out

    (private_dir / "websrv.config").write_text(CONFIG)
    assert CONFIG in DOC
    run(pmcd, PMLOGGER, cwd=private_dir)
    out = run(pmcd, PMREP_ARCHIVE, cwd=private_dir)
    replay = rates(out)
    assert replay[0] == "N/A" and len(replay) >= 6, out
    # every rate is the server's; the last row may be past the last sample (N/A)
    numbers = replay[1:-1] + ([] if replay[-1] == "N/A" else replay[-1:])
    assert len(numbers) >= 5 and all(in_range(r) for r in numbers), out

    # a crash (SIGKILL to the whole server) leaves the files; prune removes them
    os.killpg(server.pid, signal.SIGKILL)
    server.wait(30)
    assert len(list(private_mmv_dir.iterdir())) == 3
    argv = [sys.executable, "-m", "pmda_mmv", *shown(PRUNE)[1:], str(private_mmv_dir)]
    pruned = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert pruned.returncode == 0, pruned.stderr
    assert pruned.stdout.splitlines()[-1] == f"{private_mmv_dir}: 3 files removed, 0 kept"
    assert list(private_mmv_dir.iterdir()) == []


def test_recycled_workers_never_give_a_negative_total_rate(
    private_pmcd: Callable[..., PrivatePmcd],
    private_mmv_dir: Path,
    servers: Callable[..., subprocess.Popen[bytes]],
) -> None:
    # Workers recycled every ~1 s: the total falls back at each recycle, which pmrep
    # shows as N/A (what the doc says), never as a negative rate.
    servers(private_mmv_dir, "--rate", "50", "--max-requests", "50")
    pmcd = private_pmcd(our_agent(private_mmv_dir))
    out = run(pmcd, PMREP)
    live = rates(out)
    assert len(live) == 4, out
    assert all(r == "N/A" or float(r) >= 0 for r in live), out
